"""ONNX Runtime as a target runtime (`onnx:MODEL`): the converted checkpoint exported once by
onnxruntime-genai's model builder, int4 weights (MatMulNBits) with int8 activations inside the
matmuls (accuracy level 4), run by onnxruntime's CPU kernels.

Why it is here: on a CPU a speculative pass of w tokens costs what its matmuls cost, and llama.cpp's
cost grows about linearly with w where onnxruntime's int4 kernels grow more slowly, so the same
drafts buy more (`specdecode profile curve onnx:default llamacpp:default@q4_0` measures both here).

One row is one sequence (OrtSequence, the SequenceRunner protocol) with its own key/value buffers,
written in place; a rollback shortens the attention mask. Rows run one after another
(backends.serial.SerialRunner), so a row's logits never depend on another row.
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


def available() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return False
    return True


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
    """One inference session over an exported model, shared by every row."""

    def __init__(self, model_dir: Path, threads: int | None = None):
        import onnxruntime as ort

        from .llamacpp import default_threads

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or default_threads()
        # Idle workers would spin on the cores the rest of the step (sampling, a draft) needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
        decoder = json.loads((model_dir / "genai_config.json").read_text())["model"]
        self.max_context = int(decoder["context_length"])
        self.vocab_size = int(decoder["vocab_size"])
        self.heads = int(decoder["decoder"]["num_key_value_heads"])
        self.head_dim = int(decoder["decoder"]["head_size"])
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.past = [i.name for i in self.session.get_inputs() if i.name.startswith("past_key_values")]
        self.dtype = np.float16 if "float16" in self.session.get_inputs()[-1].type else np.float32

    def buffers(self, capacity: int) -> dict[str, np.ndarray]:
        return {name: np.zeros((1, self.heads, capacity, self.head_dim), dtype=self.dtype) for name in self.past}


class OrtSequence:
    """One row: the SequenceRunner protocol over a shared OrtModel.

    The cache is a preallocated buffer per layer, bound as both the past input and the present output
    of each pass, so the attention op writes the new positions in place (its shared-buffer mode)
    instead of handing back a longer copy. The attention mask's length says how many positions are
    real: a rollback shortens it, and the stale entries past it are overwritten by the next pass.
    The buffer doubles when a pass would not fit."""

    backend = "onnxruntime"
    initial_capacity = 512

    def __init__(self, model: OrtModel):
        self.model = model
        self.vocab_size = model.vocab_size
        self.max_context = model.max_context
        self.capacity = 0
        self.cache: dict[str, np.ndarray] = {}
        self.values: dict = {}
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._length = 0

    def spawn(self) -> "OrtSequence":
        return OrtSequence(self.model)

    def _reserve(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        import onnxruntime as ort

        capacity = max(self.capacity, self.initial_capacity)
        while capacity < needed:
            capacity *= 2
        grown = self.model.buffers(min(capacity, self.max_context))
        for name, old in self.cache.items():
            grown[name][:, :, : self._length] = old[:, :, : self._length]
        self.cache, self.capacity = grown, grown[self.model.past[0]].shape[2]
        self.values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in grown.items()}

    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        total = self._length + len(tokens)
        if total > self.max_context:
            raise ValueError(f"{total} tokens exceed the model's context of {self.max_context}")
        self._reserve(total)
        binding = self.model.session.io_binding()
        binding.bind_cpu_input("input_ids", np.asarray([tokens], dtype=np.int64))
        binding.bind_cpu_input("attention_mask", np.ones((1, total), dtype=np.int64))
        for name, value in self.values.items():
            binding.bind_ortvalue_input(name, value)
            binding.bind_ortvalue_output(name.replace("past_key_values", "present"), value)
        binding.bind_output("logits")
        self.model.session.run_with_iobinding(binding)
        self._length = total
        logits = torch.from_numpy(binding.get_outputs()[-1].numpy()[0])
        return (logits if all_logits else logits[-1:]).float()

    def truncate(self, length: int) -> None:
        self._length = min(self._length, length)
