"""llama.cpp backend (optional extra `llamacpp`): a GGUF model run by llama-cpp-python.

It implements the same ModelRunner protocol as the transformers backend, so it can be the draft,
the target, or both; our rejection step runs on the logits it returns. llama.cpp's KV cache is
indexed by position: rolling back rejected drafts removes the cache cells past the kept length,
nothing is copied.

We drive llama_decode ourselves instead of `Llama.eval`, because eval with logits_all computes the
LM head for every prompt token and keeps an n_ctx x vocab float array (2.5 GB for a 151k vocabulary
at 4096 positions); here logits are requested only for the positions a caller needs.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import torch

from ..models import ModelError


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> None:
    if not available():
        raise ModelError("the llama.cpp backend needs llama-cpp-python: pip install 'specdecode[llamacpp]' "
                         "(it builds llama.cpp from source, about 6 minutes on 2 cores)")


# llama.cpp's file types for requantisation (`llamacpp:MODEL@q4_0`): a cheaper draft reads fewer
# bytes per token; acceptance tells whether it still agrees with the target.
QUANTS = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


def split_quant(name: str) -> tuple[str, str | None]:
    """'default@q4_0' -> ('default', 'q4_0'); a name without '@' has no requantisation."""
    base, sep, quant = name.rpartition("@")
    if not sep:
        return name, None
    quant = quant.lower()
    if quant not in QUANTS:
        raise ModelError(f"unknown llama.cpp quantisation '{quant}': choose one of {', '.join(QUANTS)}")
    return base, quant


def requantized(gguf: Path, quant: str) -> Path:
    """The GGUF requantised to `quant` by llama.cpp's own quantiser (its rules: the layers' matrices
    take `quant`, the output projection keeps a higher precision), once; cached beside the original."""
    require()
    import llama_cpp

    from ..models import locked

    out = gguf.with_name(f"{gguf.stem}@{quant}.gguf")
    with locked(f"quant-{out.name}"):
        if out.is_file():
            return out
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = QUANTS[quant]
        params.allow_requantize = True
        params.quantize_output_tensor = True
        params.nthread = default_threads()
        tmp = out.with_suffix(".tmp")
        if llama_cpp.llama_model_quantize(str(gguf).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
            tmp.unlink(missing_ok=True)
            raise ModelError(f"llama.cpp could not requantise {gguf} to {quant}")
        tmp.replace(out)
        return out


def default_threads() -> int:
    return int(os.environ.get("SPECDECODE_LLAMACPP_THREADS") or len(os.sched_getaffinity(0)))


def load_llama(path: str | Path, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
               logits_all: bool = False):
    """A llama_cpp.Llama over a GGUF file, quiet, with logits only where asked for (logits_all: for
    llama-cpp-python's own speculative generation, which keeps n_ctx rows of logits)."""
    require()
    from llama_cpp import Llama

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"no GGUF file at {path}")
    threads = n_threads or default_threads()
    try:
        return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads,
                     n_threads_batch=threads, logits_all=logits_all, verbose=False)
    except (ValueError, RuntimeError) as exc:
        raise ModelError(f"llama.cpp could not load {path}: {exc}") from exc


class LlamaCppRunner:
    """ModelRunner over one llama.cpp context (one sequence)."""

    backend = "llamacpp"

    def __init__(self, llm, gguf: Path | None = None):
        self.llm = llm
        self.gguf = gguf
        self.vocab_size = int(llm.n_vocab())
        self.max_context = int(llm.n_ctx())
        self._n_batch = int(llm.n_batch)

    @classmethod
    def load(cls, path: str | Path, n_ctx: int = 4096, n_threads: int | None = None) -> "LlamaCppRunner":
        return cls(load_llama(path, n_ctx=n_ctx, n_threads=n_threads), Path(path))

    @property
    def length(self) -> int:
        return int(self.llm.n_tokens)

    def reset(self) -> None:
        self.truncate(0)

    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward needs at least one token")
        llm = self.llm
        if llm.n_tokens + len(tokens) > self.max_context:
            raise ValueError(f"{llm.n_tokens + len(tokens)} tokens do not fit the llama.cpp context of "
                             f"{self.max_context}: load it with a larger n_ctx")
        out = []
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start:start + self._n_batch]
            last_chunk = start + self._n_batch >= len(tokens)
            n_past = llm.n_tokens
            # Flags: every position when all logits are wanted, else only the last one (the batch
            # helper always flags the last position of a chunk).
            llm._batch.set_batch(batch=chunk, n_past=n_past, logits_all=all_logits)
            llm._ctx.decode(llm._batch)
            llm.input_ids[n_past:n_past + len(chunk)] = chunk
            llm.n_tokens = n_past + len(chunk)
            if all_logits or last_chunk:
                rows = len(chunk) if all_logits else 1
                ptr = llm._ctx.get_logits()
                logits = np.ctypeslib.as_array(ptr, shape=(rows * self.vocab_size,)).reshape(rows, self.vocab_size)
                out.append(torch.from_numpy(logits.copy()))
        return torch.cat(out) if all_logits else out[-1]

    def truncate(self, length: int) -> None:
        if length > self.llm.n_tokens:
            raise ValueError(f"cannot truncate a cache of {self.llm.n_tokens} tokens to {length}")
        self.llm._ctx.kv_cache_seq_rm(-1, length, -1)
        self.llm.n_tokens = length
