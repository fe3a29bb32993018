"""transformers models: loading (dtypes, int8, tensor parallel) and their shapes. The runner over
them is hf_batch.BatchRunner."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float32": "float32",
    "fp32": "float32",
    "float16": "float16",
    "fp16": "float16",
    "int8": "int8",
    "w8a8": "w8a8",
    "auto": "auto",
}


def parse_dtype(name: str) -> str:
    """Canonical dtype name: bfloat16, float32, float16, int8 (dynamic int8 linear layers) or w8a8
    (int8 linear layers whose rows are independent, w8a8.py).

    auto = bf16 on a GPU; on a CPU the faster of bf16 and float32 on this machine (dtype_choice:
    timed once, cached per machine); quantisation (int8, w8a8) is only ever asked for.
    """
    try:
        canonical = DTYPES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown dtype '{name}': use one of auto, bfloat16 (bf16), float32 (fp32), float16 (fp16), int8, w8a8"
        ) from None
    if canonical == "auto":
        from .dtype_choice import choice

        return choice()["dtype"]
    return canonical


def world_size() -> int:
    """Processes in this job (set by torchrun); above 1 the target is tensor-parallel."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def load_model(path: str, dtype: str, tensor_parallel: bool = False) -> tuple[PreTrainedModel, object]:
    """Load a transformers checkpoint for inference.

    tensor_parallel: shard the model over the torchrun processes with transformers' tp_plan="auto"
    (column/row-parallel linears, all-reduces inside the model); every rank gets the same logits.

    int8 = float32 model whose nn.Linear layers are replaced by dynamically quantised int8 ones
    (fbgemm). On CPUs without AVX-512 bf16 it is several times faster than bf16, whose matmuls
    then run one row at a time. Activations are quantised per tensor, so a token's logits depend
    slightly on the other tokens in the same pass: use it for drafts freely, and for a target only
    knowing that verification then perturbs p (docs/backends.md).
    """
    dtype = parse_dtype(dtype)
    # transformers' per-tensor progress bars and notices drown the CLI's own output.
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if dtype in ("int8", "w8a8") and tensor_parallel:
        raise ValueError(f"{dtype} does not combine with tensor parallelism: use bf16 or fp32 for a sharded target")
    if dtype == "int8":
        return _load_int8(Path(path)), tokenizer
    if dtype == "w8a8":
        from .w8a8 import quantise

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return quantise(model).eval(), tokenizer
    extra = {}
    if tensor_parallel:
        from transformers import DistributedConfig

        extra["distributed_config"] = DistributedConfig(tp_plan="auto")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **extra)
    model.eval()
    return model, tokenizer


def _load_int8(path: Path) -> PreTrainedModel:
    """Quantising a 1.5B model takes ~40 s here; the result is cached as a pickled module."""
    from .. import registry as models

    weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    stamp = "|".join(f"{w.resolve()}:{w.stat().st_size}:{w.stat().st_mtime_ns}" for w in weights)
    key = hashlib.sha256(f"{path.resolve()}|{stamp}|{torch.__version__}".encode()).hexdigest()[:16]
    cached = models.cache_dir() / "int8" / f"{path.name}-{key}.pt"
    with models.locked(f"int8-{key}"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's and TypedStorage deprecation notices
            if cached.is_file():
                return torch.load(cached, weights_only=False).eval()
            from torch.ao.quantization import quantize_dynamic

            with models.console.status(f"quantising {path.name} to int8 (once, cached)"):
                model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
                model = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        torch.save(model, tmp)
        tmp.replace(cached)
        return model


def logit_width(model: PreTrainedModel) -> int:
    """Columns of the logits the model returns (the LM head may be wider than the tokenizer)."""
    head = model.get_output_embeddings()
    return int(getattr(head, "out_features", None) or model.config.vocab_size)


def context_length(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 1 << 30))
