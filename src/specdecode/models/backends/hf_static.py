"""The fast torch path: a preallocated KV cache indexed by position, and a compiled one-token step.

`BatchRunner` (hf_batch.py) keeps transformers' DynamicCache, which grows by concatenation and is cut with `crop`.
`StaticRunner` allocates the cache once (transformers' StaticCache) and writes each new token at its
position: a rollback only moves the position back (entries past it are masked by the causal mask and
overwritten later), a new request only resets the position, and nothing is copied, allocated or
freed per step. Its shapes do not change from step to step, so the one-token forward (the draft's
loop, plain decoding) can be compiled with `torch.compile`; passes of other widths (prefill, verify,
catch-up) run eagerly, so the compiled graph never sees a new shape and never recompiles.

The capacity starts at `initial` positions and doubles when a sequence needs more (one copy per
doubling, amortised), because attention reads the whole allocated cache (masked) on every pass.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel, StaticCache

from .hf import context_length, logit_width


class StaticRunner:
    """A SequenceRunner over a transformers model with a static KV cache, batch size 1."""

    def __init__(self, model: PreTrainedModel, compile: bool = False, initial: int = 1024,
                 compile_mode: str | None = None):
        """compile_mode: torch.compile's mode for the one-token step; "reduce-overhead" replays it as
        a CUDA graph, which on a GPU removes the per-kernel launch cost that dominates a small batch."""
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = logit_width(model)
        self.max_context = context_length(model)
        self.capacity = min(initial, self.max_context)
        self.cache = self._new_cache(self.capacity)
        self._length = 0
        self.compiled = compile
        self.compile_mode = compile_mode
        self.compile_s = 0.0  # time spent in the first compiled calls (tracing and code generation)
        self._step = torch.compile(self._forward, dynamic=False, mode=compile_mode) if compile else self._forward
        self._compiled_shapes: set[int] = set()

    def spawn(self) -> "StaticRunner":
        return StaticRunner(self.model, compile=self.compiled, initial=self.capacity, compile_mode=self.compile_mode)

    @property
    def backend(self) -> str:
        return "torch-compiled" if self.compiled else "torch-static"

    def _new_cache(self, capacity: int) -> StaticCache:
        return StaticCache(config=self.model.config, max_cache_len=capacity)

    @property
    def length(self) -> int:
        return self._length

    @torch.inference_mode()
    def reset(self) -> None:
        self._set_length(0)

    def _set_length(self, length: int) -> None:
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(length)
        self._length = length

    @torch.inference_mode()
    def _grow(self, needed: int) -> None:
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        capacity = min(capacity, self.max_context)
        if capacity < needed:
            raise ValueError(f"{needed} positions exceed the model's context of {self.max_context}")
        bigger = self._new_cache(capacity)
        if self._length and self.cache.layers[0].is_initialized:
            for old, new in zip(self.cache.layers, bigger.layers):
                new.lazy_initialization(old.keys, old.values)
                new.keys[:, :, : self._length].copy_(old.keys[:, :, : self._length])
                new.values[:, :, : self._length].copy_(old.values[:, :, : self._length])
                new.cumulative_length.fill_(self._length)
        self.cache, self.capacity = bigger, capacity
        self._compiled_shapes.clear()  # the cache's shape changed: the compiled step retraces once

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, keep: int) -> torch.Tensor:
        return self.model(input_ids=ids, past_key_values=self.cache, cache_position=positions, use_cache=True,
                          logits_to_keep=keep).logits

    @torch.inference_mode()
    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward needs at least one token")
        n = len(tokens)
        if self._length + n > self.capacity:
            self._grow(self._length + n)
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        positions = torch.arange(self._length, self._length + n, device=self.device)
        if n == 1 and self.compiled:
            first = self.capacity not in self._compiled_shapes
            start = time.perf_counter()
            logits = self._step(ids, positions, 1)
            if first:
                self._compiled_shapes.add(self.capacity)
                self.compile_s += time.perf_counter() - start
        else:
            logits = self._forward(ids, positions, 0 if all_logits else 1)
        self._length += n
        return logits[0].float().cpu()  # the engine samples on the CPU (models/device.py)

    @torch.inference_mode()
    def truncate(self, length: int) -> None:
        if length > self._length:
            raise ValueError(f"cannot truncate a cache of {self._length} tokens to {length}")
        if length < self._length:
            self._set_length(length)
