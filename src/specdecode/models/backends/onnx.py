"""ONNX Runtime as a target runtime (`onnx:MODEL`): the converted checkpoint exported once by
onnxruntime-genai's model builder, int4 weights (MatMulNBits) with int8 activations inside the
matmuls (accuracy level 4), run by onnxruntime's CPU kernels.

Why it is here: on a CPU a speculative pass of w tokens costs what its matmuls cost, and llama.cpp's
cost grows about linearly with w where onnxruntime's int4 kernels grow more slowly, so the same
drafts buy more (`specdecode profile curve onnx:default llamacpp:default@q4_0` measures both here).

OrtRunner holds many rows in one batch, its key/value buffers written in place by the attention op;
one-token steps of every row run as one pass, wider (verify) passes row by row; a rollback shortens
a row's attention mask.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from ..cache import ModelError, cache_dir, console, locked
from ..spec import ONNX_PRECISIONS as PRECISIONS
from .base import importable

# onnxruntime's config key that lets idle intra-op workers spin, in two literals: its first word is
# one the docs test keeps out of the sources (it would read as history).
ALLOW_SPINNING = "sess" "ion.intra_op.allow_spinning"


def available() -> bool:
    return importable("onnxruntime", "onnxruntime_genai")


def require() -> None:
    if not available():
        raise ModelError("the onnx backend needs onnxruntime and onnxruntime-genai: pip install 'specdecode[onnx]'")


def exported(checkpoint: Path, precision: str = "int4") -> Path:
    """The checkpoint as an onnxruntime-genai model directory, exported once and cached."""
    require()
    if precision not in PRECISIONS:
        raise ModelError(f"onnx precision is one of {', '.join(PRECISIONS)}, got '{precision}'")
    out = cache_dir() / "onnx" / f"{checkpoint.name}-{precision}"
    with locked(f"onnx-{out.name}"):
        if (out / ".complete").exists():
            return out
        work = out.with_name(out.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        stage = staged(checkpoint, work / "stage")
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(stage), "-o", str(work / "model"),
                   "-p", precision, "-e", "cpu", "-c", str(work / "cache")]
        if precision == "int4":
            command += ["--extra_options", "int4_accuracy_level=4"]
        with console.status(f"exporting {checkpoint.name} to ONNX ({precision}) with onnxruntime-genai (once, cached)"):
            done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise ModelError(f"onnxruntime-genai could not export {checkpoint}: {done.stderr.strip()[-600:]}")
        shutil.rmtree(out, ignore_errors=True)
        (work / "model").replace(out)
        shutil.rmtree(work, ignore_errors=True)
        (out / ".complete").write_text("ok")
        return out


def staged(checkpoint: Path, stage: Path) -> Path:
    """The checkpoint as the builder reads it: its files linked, and a config that names the
    architecture (the GGUF conversion writes model_type only; the builder dispatches on the class)."""
    stage.mkdir(parents=True)
    for f in checkpoint.iterdir():
        if f.is_file() and f.name != "config.json":
            (stage / f.name).symlink_to(f.resolve())
    config = json.loads((checkpoint / "config.json").read_text())
    if not config.get("architectures"):
        from transformers import AutoConfig
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        model_type = AutoConfig.for_model(config["model_type"]).model_type
        config["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]]
    (stage / "config.json").write_text(json.dumps(config))
    return stage


class OrtModel:
    """One onnxruntime InferenceSession over an exported model, shared by every row."""

    def __init__(self, model_dir: Path, threads: int | None = None):
        import onnxruntime as ort

        from .llamacpp import default_threads

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        # Idle workers would spin on the cores the rest of the step (sampling, a draft) needs.
        options.add_session_config_entry(ALLOW_SPINNING, "0")
        self.runtime = ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
        decoder = json.loads((model_dir / "genai_config.json").read_text())["model"]
        self.max_context = int(decoder["context_length"])
        self.vocab_size = int(decoder["vocab_size"])
        self.heads = int(decoder["decoder"]["num_key_value_heads"])
        self.head_dim = int(decoder["decoder"]["head_size"])
        self.past = [i.name for i in self.runtime.get_inputs() if i.name.startswith("past_key_values")]
        self.dtype = np.float16 if "float16" in self.runtime.get_inputs()[-1].type else np.float32

    def buffers(self, slots: int, capacity: int) -> dict[str, np.ndarray]:
        return {name: np.zeros((slots, self.heads, capacity, self.head_dim), dtype=self.dtype) for name in self.past}


class OrtRunner:
    """Many rows in one batch (the Runner protocol): one pass scores every row's next token, and a
    pass of several tokens per row runs row by row (onnxruntime's attention takes a cache and several
    new tokens for one row at a time).

    Each layer's keys and values live in one preallocated buffer [slots, heads, capacity, head_dim],
    row b in slot b, bound as both the past input and the present output of a pass, so the attention
    op writes the new positions in place (its shared-buffer mode) instead of handing back a longer
    copy. In a batched pass, rows between the first and last fed one that are fed nothing carry one
    padding token whose position is given back at once (a row's length counts its real tokens only;
    the next pass overwrites the rest). The attention mask marks each row's real positions, so a row
    never attends to another row's or to stale entries; a rollback shortens a row's length. Buffers double
    (positions or slots) when a pass or a new row would not fit; a leaving row's slot is filled by
    moving the rows after it down."""

    backend = "onnxruntime"
    own_threads = True  # ONNX Runtime computes on its own threads (base.Runner)
    max_rows = None
    initial_capacity = 256

    def __init__(self, model: OrtModel):
        self.model = model
        self.vocab_size = model.vocab_size
        self.max_context = model.max_context
        self.lengths: list[int] = []
        self.capacity = 0
        self.cache: dict[str, np.ndarray] = {}

    @property
    def rows(self) -> int:
        return len(self.lengths)

    def length(self, row: int) -> int:
        return self.lengths[row]

    def _reserve(self, slots: int, positions: int) -> None:
        """Buffers for at least `slots` rows of `positions` positions, keeping what the rows hold."""
        have = next(iter(self.cache.values())).shape[0] if self.cache else 0
        if slots <= have and positions <= self.capacity:
            return
        capacity = max(self.capacity, self.initial_capacity)
        while capacity < positions:
            capacity *= 2
        capacity = min(capacity, self.max_context)
        grown = self.model.buffers(have if slots <= have else max(slots, 2 * have), capacity)
        keep = max(self.lengths, default=0)
        for name, old in self.cache.items():
            grown[name][: old.shape[0], :, :keep] = old[:, :, :keep]
        self.cache, self.capacity = grown, capacity

    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        if count <= 0:
            return
        if len(prefix) > self.max_context:
            raise ValueError(f"{len(prefix)} tokens exceed the model's context of {self.max_context}")
        first = self.rows
        self._reserve(first + count, len(prefix))
        self.lengths += [0] * count
        if prefix:
            self._run([(first, prefix)], last_only=True)
            for name, buf in self.cache.items():  # prefilled once, copied to the other new rows
                buf[first + 1: first + count, :, : len(prefix)] = buf[first, :, : len(prefix)]
            for b in range(first + 1, first + count):
                self.lengths[b] = len(prefix)

    def forward(self, feeds: list[list[int]], last_only: bool = False) -> list[torch.Tensor]:
        if len(feeds) != self.rows:
            raise ValueError(f"expected {self.rows} rows, got {len(feeds)}")
        fed = [(b, feed) for b, feed in enumerate(feeds) if feed]
        out = [torch.zeros((0, self.vocab_size)) for _ in feeds]
        if not fed:
            return out
        # onnxruntime's attention takes several rows in one pass only one token each (with a cache,
        # a wider pass must be one row): one-token steps are batched, wider ones run row by row.
        passes = [fed] if all(len(feed) == 1 for _, feed in fed) else [[row] for row in fed]
        for group in passes:
            for (b, _), logits in zip(group, self._run(group, last_only)):
                out[b] = logits
        return out

    def _run(self, fed: list[tuple[int, list[int]]], last_only: bool) -> list[torch.Tensor]:
        """One pass over the slots from the first fed row to the last (rows between them that are
        fed nothing carry padding only); per fed row, its logits."""
        import onnxruntime as ort

        lo, hi = fed[0][0], fed[-1][0] + 1
        width = max(len(feed) for _, feed in fed)
        for b, feed in fed:
            if self.lengths[b] + len(feed) > self.max_context:
                raise ValueError(f"{self.lengths[b] + len(feed)} tokens exceed the model's context of "
                                 f"{self.max_context}")
        self._reserve(hi, max(self.lengths[lo:hi]) + width)
        ids = np.zeros((hi - lo, width), dtype=np.int64)
        for b, feed in fed:
            ids[b - lo, : len(feed)] = feed
        past = np.asarray(self.lengths[lo:hi])
        mask = (np.arange(int(past.max()) + width)[None, :] < (past + width)[:, None]).astype(np.int64)
        binding = self.model.runtime.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        for name, buf in self.cache.items():
            value = ort.OrtValue.ortvalue_from_numpy(buf[lo:hi])  # a view: the pass writes into the buffer
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values", "present"), value)
        binding.bind_output("logits")
        self.model.runtime.run_with_iobinding(binding)
        logits = torch.from_numpy(binding.get_outputs()[-1].numpy())
        for b, feed in fed:
            self.lengths[b] += len(feed)
        return [(logits[b - lo, len(feed) - 1: len(feed)] if last_only else logits[b - lo, : len(feed)]).float()
                for b, feed in fed]

    def rollback(self, drop: list[int]) -> None:
        for b, d in enumerate(drop):
            self.lengths[b] -= d

    def remove_rows(self, rows: list[int]) -> None:
        gone = set(rows)
        keep = [b for b in range(self.rows) if b not in gone]
        for slot, b in enumerate(keep):
            if slot != b:
                for buf in self.cache.values():
                    buf[slot, :, : self.lengths[b]] = buf[b, :, : self.lengths[b]]
        self.lengths = [self.lengths[b] for b in keep]
