"""KV of recently prefilled prompts, so that a prompt sharing a prefix with one (a system prompt, a
few-shot block, the earlier turns of a chat) prefills only what follows it.

A cached key/value at position i depends only on tokens 0..i (causal attention), so reusing the
first m positions of another prompt that starts with the same m tokens gives the same cache as
prefilling them again, up to floating-point noise of a different matrix shape: outputs keep their
distribution. Bounded by a number of tokens; least recently used entries leave first. An entry that
is a prefix of a newer one is dropped (the newer one covers it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

MIN_MATCH = 16  # shorter shared prefixes are prefilled again: not worth the copy


@dataclass
class Entry:
    tokens: np.ndarray
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, keys and values [1, heads, len, dim]


class PrefixCache:
    def __init__(self, max_tokens: int):
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            raise ValueError(f"the prefix cache holds a number of tokens >= 0 (0: off), got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.entries: OrderedDict[tuple[int, ...], Entry] = OrderedDict()
        self.tokens = 0
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0
        self.queried_tokens = 0

    def match(self, prefix: list[int]) -> tuple[int, Entry | None]:
        """The longest cached start of `prefix` (at least MIN_MATCH tokens): (length, entry)."""
        self.queried_tokens += len(prefix)
        if not self.entries or len(prefix) < MIN_MATCH:
            self.misses += 1
            return 0, None
        query = np.asarray(prefix, dtype=np.int64)
        best, best_key = 0, None
        for key, entry in self.entries.items():
            n = min(len(entry.tokens), len(query))
            differ = np.flatnonzero(entry.tokens[:n] != query[:n])
            m = int(differ[0]) if differ.size else n
            if m > best:
                best, best_key = m, key
        if best < MIN_MATCH:
            self.misses += 1
            return 0, None
        self.entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += best
        return best, self.entries[best_key]

    def store(self, prefix: list[int], layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep the KV of a prefilled prefix (copied: the caller's cache goes on changing)."""
        n = len(prefix)
        if n < MIN_MATCH or n > self.max_tokens:
            return
        key = tuple(prefix)
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        tokens = np.asarray(prefix, dtype=np.int64)
        covered = [k for k, e in self.entries.items()
                   if len(e.tokens) <= n and np.array_equal(e.tokens, tokens[: len(e.tokens)])]
        for old in covered:
            self._drop(old)
        self.entries[key] = Entry(tokens, [(k[:, :, :n].clone(), v[:, :, :n].clone()) for k, v in layers])
        self.tokens += n
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self.entries)))

    def _drop(self, key) -> None:
        self.tokens -= len(self.entries.pop(key).tokens)

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0

    def stats(self) -> dict:
        return {"entries": len(self.entries), "tokens": self.tokens, "max_tokens": self.max_tokens, "hits": self.hits,
                "misses": self.misses, "reused_tokens": self.reused_tokens, "queried_tokens": self.queried_tokens}
