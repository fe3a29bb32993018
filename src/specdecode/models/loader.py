"""Load one model by spec (transformers or llama.cpp, a shortlisted draft) and wrap it as a runner."""

from __future__ import annotations

from . import shortlist
from .backends.hf import load_model, logit_width, parse_dtype, world_size
from .device import on_gpu
from .backends.hf_batch import BatchRunner
from .backends.serial import SerialRunner
from .registry import ModelError, check_vocab_compatible, resolve
from .spec import ModelSpec


def load(spec: str | ModelSpec, role: str, dtype: str, max_rows: int = 8, device: str = "cpu"):
    """(transformers model or runner, tokenizer), on `device` (device.resolve_device's answer).

    The spec is parsed here, once (models/spec.py); what follows reads its fields. On a GPU a
    transformers model runs in SlotRunner (passes captured as CUDA graphs); `hf-slots:` asks for that
    runner on any device."""
    spec = ModelSpec.parse(spec).for_role(role)
    backend, vocab = backend_of(spec), spec.shortlist
    if backend == "llamacpp":
        return _load_llamacpp(spec, role, max_rows, device)
    if backend == "onnx":
        return _load_onnx(spec, role, device)
    resolved = resolve(spec.source, role)
    if on_gpu(device) and dtype in ("int8", "w8a8"):
        raise ModelError(f"--dtype {dtype} runs on the CPU only (its int8 kernels are CPU ones): use bf16 on a GPU")
    try:
        # Under torchrun the target is sharded; the (small) draft is replicated on every rank.
        model, tokenizer = load_model(str(resolved.path), dtype, tensor_parallel=role == "target" and world_size() > 1)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"could not load the {role} model from {resolved.path}: {exc}") from exc
    if device != "cpu":
        model = model.to(device)
    if backend in ("hf-static", "hf-compile"):
        from .backends.hf_static import StaticRunner

        if vocab is not None:
            raise ModelError(f"'{spec.text}': the vocabulary shortlist runs on the hf and llamacpp backends")
        return StaticRunner(model, compile=backend == "hf-compile"), tokenizer
    if backend == "hf-slots" or (on_gpu(device) and vocab is None):
        from .backends.hf_slots import SlotRunner

        if vocab is not None:
            raise ModelError(f"'{spec.text}': the vocabulary shortlist runs on the hf and llamacpp backends")
        return SlotRunner(model, slots=max_rows + 1), tokenizer
    if vocab is not None:
        full = logit_width(model)
        ids = shortlist.shortlist_for(tokenizer, full, vocab)
        return shortlist.Shortlisted(BatchRunner(shortlist.slice_head(model, ids)), ids, full), tokenizer
    return model, tokenizer


def load_draft(spec: str | ModelSpec, dtype: str, target_model, tokenizer, max_rows: int = 8, device: str = "cpu"):
    """(draft model or runner, its tokenizer), checked against the target's vocabulary."""
    draft_model, draft_tokenizer = load(spec, "draft", parse_dtype(dtype), max_rows, device)
    check_vocab_compatible(tokenizer, draft_tokenizer, vocab_width(target_model), vocab_width(draft_model))
    return draft_model, draft_tokenizer


def _load_llamacpp(spec: ModelSpec, role: str, max_rows: int, device: str = "cpu"):
    """llamacpp:MODEL[@QUANT][+vN]: the GGUF as it is (or requantised once by llama.cpp, or with its
    vocabulary cut to a shortlist of N tokens: models/shortlist.py), with the tokenizer of its converted
    checkpoint."""
    from transformers import AutoTokenizer

    from .backends.llamacpp import LlamaCppRunner, gpu_offload, requantized

    if on_gpu(device) and not gpu_offload():
        raise ModelError(f"--device {device}: the installed llama.cpp was built for the CPU (no GPU offload), so "
                         f"'{spec.text}' cannot run there: use a transformers model (--target default), or --device cpu")

    vocab, quant = spec.shortlist, spec.quant
    resolved = resolve(spec.source, role)
    if resolved.gguf is None:
        raise ModelError(f"the llama.cpp backend loads GGUF files, and the {role} '{spec.text}' is not one: "
                         "give a .gguf file or a bundled model name")
    gguf = requantized(resolved.gguf, quant) if quant else resolved.gguf
    tokenizer = AutoTokenizer.from_pretrained(str(resolved.path))
    rows = sequence_slots(max_rows)
    if vocab is None:
        return LlamaCppRunner.load(gguf, max_rows=rows, gpu=on_gpu(device)), tokenizer
    full = LlamaCppRunner.vocab_of(gguf)
    ids = shortlist.shortlist_for(tokenizer, full, vocab, byte_tokens=True)
    runner = LlamaCppRunner.load(shortlist.shortlisted_gguf(gguf, ids), max_rows=rows,
                                 embeddings=shortlist.EmbeddingTable(gguf), gpu=on_gpu(device))
    return shortlist.Shortlisted(runner, ids, full, source_gguf=gguf), tokenizer


def sequence_slots(max_rows: int) -> int:
    """llama.cpp sequences for a batch of max_rows: one more row than the batch (calibration times a
    scratch row beside nothing else, and a rejoining draft row is re-added before it is removed),
    rounded up to a power of two, at least 16. With llama.cpp's AMX kernels, contexts of 3, 5, 6, 9
    or 12 sequences prefilled the 1.5B target 1.5x slower than contexts of 16 (docs/backends.md,
    "AMX"); the unified cache's size does not depend on the count."""
    return max(16, 1 << max_rows.bit_length())


def _load_onnx(spec: ModelSpec, role: str, device: str = "cpu"):
    """onnx:MODEL[@int4|@fp32]: the converted checkpoint exported once by onnxruntime-genai, every row
    scored in one pass (backends/onnx.py)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from .backends.onnx import OrtModel, OrtRunner, exported

    if on_gpu(device):
        raise ModelError(f"--device {device}: the onnx backend runs onnxruntime's CPU kernels; use --device cpu")
    if spec.shortlist is not None:
        raise ModelError(f"'{spec.text}': the vocabulary shortlist runs on the hf and llamacpp backends")
    resolved = resolve(spec.source, role)
    model_dir = exported(Path(resolved.path), spec.quant or "int4")
    return OrtRunner(OrtModel(model_dir)), AutoTokenizer.from_pretrained(str(resolved.path))


def backend_of(spec: str | ModelSpec) -> str:
    """hf or llamacpp, as the spec's prefix says; unprefixed, a .gguf file given by path goes to
    llama.cpp when it is installed (bundled names and "default" stay on transformers)."""
    spec = ModelSpec.parse(spec)
    if spec.backend is not None:
        return spec.backend
    if spec.source.endswith(".gguf"):
        from .backends import llamacpp

        return "llamacpp" if llamacpp.available() else "hf"
    return "hf"


def is_runner(model) -> bool:
    """A runner (every runner names its backend), not a bare transformers model."""
    return hasattr(model, "backend")


def as_runner(model, prefix_cache: int = 0):
    """A batch Runner: transformers models get one cache for all rows (and a prefix cache of that
    many tokens), single-sequence runners run their rows one after another, batch runners pass
    through."""
    if not is_runner(model):
        return BatchRunner(model, prefix_cache=prefix_cache)
    return model if hasattr(model, "add_rows") else SerialRunner(model)


def vocab_width(model) -> int:
    return model.vocab_size if is_runner(model) else logit_width(model)


def backend_name(model) -> str:
    """The backend running a model or runner, as the bench reports it."""
    return model.backend if is_runner(model) else "torch"


def torch_model(model):
    """The transformers model behind a model or a torch runner (None for other backends)."""
    if not is_runner(model):
        return model
    return getattr(model, "model", None) if model.backend.startswith("torch") else None


def eos_ids(model, tokenizer) -> list[int]:
    ids: set[int] = set()
    gen_cfg = getattr(model, "generation_config", None)
    for source in (getattr(gen_cfg, "eos_token_id", None), getattr(getattr(model, "config", None), "eos_token_id", None),
                   getattr(tokenizer, "eos_token_id", None)):
        if source is None:
            continue
        ids.update([source] if isinstance(source, int) else source)
    return sorted(ids)
