"""Prompt lookup: propose what followed the latest earlier occurrence of the current suffix."""

from __future__ import annotations

import numpy as np

from .base import Proposal


class NgramProposer:
    """Match the last n tokens (n from max_n down to min_n) anywhere earlier in prompt + output.

    The most recent match wins: in generated text the latest repetition is the best predictor of
    the next one (code that restates the prompt, lists that repeat a pattern). Deterministic, so
    q is one-hot and acceptance is simply p(token).
    """

    name = "ngram"

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram sizes need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n = max_n
        self.min_n = min_n

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, context, k, params, generator, min_confidence: float = 0.0) -> Proposal:
        return Proposal(tokens=lookup(np.asarray(context, dtype=np.int64), k, self.max_n, self.min_n))


def lookup(seq: np.ndarray, k: int, max_n: int, min_n: int) -> list[int]:
    if k <= 0:
        return []
    L = len(seq)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        pattern = seq[L - n:]
        # Windows starting at 0 .. L-n-1 (the suffix itself excluded).
        windows = np.lib.stride_tricks.sliding_window_view(seq[: L - 1], n)
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return seq[start : start + k].tolist()
    return []
