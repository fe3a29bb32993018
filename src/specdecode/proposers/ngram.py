"""Prompt lookup: propose what followed the latest earlier occurrence of the current suffix."""

from __future__ import annotations

import numpy as np

from ..verification.tree import trie
from .base import Proposal, Stateless

# Occurrences of the matched suffix whose continuations a tree merges (the most recent ones).
MAX_OCCURRENCES = 64


class NgramProposer(Stateless):
    """Match the last n tokens (n from max_n down to min_n) anywhere earlier in prompt + output.

    The most recent match wins: in generated text the latest repetition is the best predictor of
    the next one (code that restates the prompt, lists that repeat a pattern). Deterministic, so
    q is one-hot and acceptance is simply p(token).

    Each match length is its own source for k="auto" (`ngram3`, `ngram2`, `ngram1`): what follows a
    three-token match is accepted far more often than what follows a one-token one, so they get
    their own acceptance, and auto may draft long after the first and not at all after the last.
    """

    name = "ngram"
    uses_draft_model = False

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram sizes need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n = max_n
        self.min_n = min_n
        self.sources = tuple(f"ngram{n}" for n in range(max_n, min_n - 1, -1))

    def reach(self, row, k: int) -> dict[str, int]:
        """How far each source reaches now: the matched length's, the others nothing."""
        n, tokens = match(np.asarray(row.context, dtype=np.int64), k, self.max_n, self.min_n)
        return {source: len(tokens) if source == f"ngram{n}" else 0 for source in self.sources}

    def propose(self, rows, plans) -> list[Proposal]:
        return [self.lookup_tree(row.context, plan.k, plan.nodes) if plan.nodes else self.lookup(row.context, plan.k)
                for row, plan in zip(rows, plans)]

    def lookup_tree(self, context: list[int], k: int, budget: int) -> Proposal:
        """Every earlier occurrence of the longest matching suffix (the latest MAX_OCCURRENCES),
        their continuations merged into a tree (tree.trie): the latest one first, the chain this
        proposer drafts without a tree, then the others, most frequent first."""
        seq = np.asarray(context, dtype=np.int64)
        n, starts = occurrences(seq, k, self.max_n, self.min_n)
        if not starts:
            return Proposal(tokens=[])
        continuations = [seq[s: s + k].tolist() for s in starts]
        tokens, parents, shares = trie(continuations, k, budget, chain=continuations[0])
        return Proposal(tokens=tokens, source=f"ngram{n}", parents=parents, shares=shares)

    def lookup(self, context: list[int], k: int) -> Proposal:
        n, tokens = match(np.asarray(context, dtype=np.int64), k, self.max_n, self.min_n)
        return Proposal(tokens=tokens, source=f"ngram{n}" if tokens else None)


def lookup(seq: np.ndarray, k: int, max_n: int, min_n: int) -> list[int]:
    return match(seq, k, max_n, min_n)[1]


def match(seq: np.ndarray, k: int, max_n: int, min_n: int) -> tuple[int, list[int]]:
    """(n, tokens): the longest suffix (n tokens, max_n..min_n) seen earlier, and up to k tokens that
    followed its latest occurrence; (0, []) when there is none."""
    n, starts = occurrences(seq, k, max_n, min_n, limit=1)
    return (n, seq[starts[0]: starts[0] + k].tolist()) if starts else (0, [])


def occurrences(seq: np.ndarray, k: int, max_n: int, min_n: int,
                limit: int = MAX_OCCURRENCES) -> tuple[int, list[int]]:
    """(n, starts): the longest suffix (n tokens, max_n..min_n) seen earlier, and where the tokens
    that followed its latest `limit` occurrences begin, most recent first; (0, []) when none."""
    if k <= 0:
        return 0, []
    L = len(seq)
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        pattern = seq[L - n:]
        # Windows starting at 0 .. L-n-1 (the suffix itself excluded).
        windows = np.lib.stride_tricks.sliding_window_view(seq[: L - 1], n)
        hits = np.flatnonzero((windows == pattern).all(axis=1))
        if hits.size:
            return n, [int(h) + n for h in hits[::-1][:limit]]
    return 0, []
