"""The interfaces model backends implement for the engine and the draft proposer."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable
from typing import Protocol

import torch


def importable(*modules: str) -> bool:
    """Whether every module imports: an optional backend's extra is installed."""
    try:
        for name in modules:
            importlib.import_module(name)
    except ImportError:
        return False
    return True


class Runner(Protocol):
    """Many sequences (rows) of one causal LM, each with its own KV cache state and length.

    Rows are addressed by their index, in the order they were added; removing rows closes the gaps.
    Every backend implements this; one that cannot batch runs its rows one after another
    (backends.serial.SerialRunner), never a separate code path in the engine.

    A runner that sets `trees = True` also scores trees (tree drafting, verification/tree.py):
    forward(feeds, parents=...) with parents[b][j] the index in feeds[b] of the token that token j
    follows (-1: the row's cache), then prune(keep) keeps the fed tokens keep[b] of each row (a path
    from its first token down) and drops the rest. The engine refuses trees on other runners.

    A runner that sets `prefills_in_pass = True` (and not `trees`) takes forward(feeds,
    unscored=...): the first unscored[b] tokens of feeds[b] enter the cache without logits, so that
    a row's prompt and its first drafts go in one pass (logits [len(feeds[b]) - unscored[b], V]).

    A runner that sets `own_threads = True` computes on threads of its own runtime, not torch's. When
    every runner of an engine does, torch is left only each row's vocabulary-wide sampling math, and
    the engine runs it on one thread (engine.Engine.step).
    """

    vocab_size: int  # width of the logits it returns
    max_context: int  # positions one row may hold
    backend: str  # what runs it, as reports name it: torch, torch-static, torch-compiled, llamacpp
    # Rows it can hold at once where that is fixed when it is loaded (llama.cpp's sequence ids);
    # runners without the attribute are bounded by memory only.
    max_rows: int | None

    @property
    def rows(self) -> int:
        """Rows currently held."""

    def length(self, row: int) -> int:
        """Tokens in a row's cache."""

    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        """`count` new rows at the end, each starting with `prefix` in its cache (prefilled once)."""

    def forward(self, feeds: list[list[int]], last_only: bool = False) -> list[torch.Tensor]:
        """Append feeds[b] (possibly empty) to row b; per row, float32 logits [len(feeds[b]), V] for
        every new position, or [1, V] for the last one only (last_only, which skips LM-head work);
        a row fed nothing gets [0, V]."""

    def rollback(self, drop: list[int]) -> None:
        """Forget the last drop[b] tokens of each row (rejected drafts)."""

    def remove_rows(self, rows: list[int]) -> None:
        """These rows leave; their cache is freed."""


class SequenceRunner(Protocol):
    """One sequence's cache: a backend that cannot batch implements this, and SerialRunner runs
    one per row."""

    vocab_size: int
    max_context: int
    backend: str

    @property
    def length(self) -> int:
        """Number of tokens currently in the KV cache."""

    def reset(self) -> None:
        """Empty the cache for a new sequence."""

    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Append `tokens`; float32 logits [n, V] for every new position, or [1, V] for the last."""

    def truncate(self, length: int) -> None:
        """Keep the first `length` cached tokens, dropping the rest."""

    def spawn(self) -> "SequenceRunner":
        """Another empty runner over the same weights (a new row)."""


def sampling_threads(runners: Iterable) -> int | None:
    """Torch's threads for the work around these runners' passes: 1 where every runner computes on
    its own runtime's threads (`own_threads`), so that torch does only vocabulary-wide sampling
    math, a few passes over a row, where every parallel op would first wake torch's other threads,
    asleep through the runtime's pass, and they would then spin beside it; None (as they are) where
    a torch model runs. The engine's steps and the measurements that price them (draft and target
    choice) run under the same rule, so that what is measured is what a generation pays."""
    return 1 if all(getattr(r, "own_threads", False) for r in runners) else None


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Torch's intra-op threads set to n inside the block (None: left as they are)."""
    if n is None:
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
