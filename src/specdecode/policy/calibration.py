"""A few timed passes to start the cost curves before real passes refine them (policy/costs.py)."""

from __future__ import annotations

import time

import torch

from ..models.backends.base import Runner
from .costs import PassCosts


SCRATCH = 16  # tokens already in the scratch row a timed pass extends
PREFILL = 128  # tokens of the timed draft prefill


class CalibrationError(ValueError):
    """A model the start-up measurement cannot run (too small a vocabulary or context)."""


def token_ids(count: int, vocab: int, start: int = 1) -> list[int]:
    """`count` ids inside a vocabulary of `vocab` tokens, cycling through it: timing needs tokens the
    model has, whatever their meaning, and a vocabulary of any size must do."""
    return [(start + i) % vocab for i in range(count)]


@torch.inference_mode()
def calibrate(costs: PassCosts, target: Runner, draft: Runner | None = None,
              widths: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> None:
    """Target passes of growing width on one scratch row (the verify curve), a draft prefill (what
    a catch-up costs per token), and one-token draft steps over growing numbers of rows (the
    batched draft curve), as many as the draft runner holds (a llama.cpp runner is sized to the
    server's batch). Token ids come from each runner's own vocabulary and no pass goes past its
    context. The runners must hold no rows."""
    _check(target, "target", 2)
    widths = tuple(w for w in widths if SCRATCH + w <= target.max_context) or (1,)
    scratch = token_ids(min(SCRATCH, target.max_context - max(widths)), target.vocab_size)
    target.add_rows(scratch)
    target.forward([token_ids(1, target.vocab_size)])  # warm-up, not booked
    target.rollback([1])
    for w in widths:
        t = time.perf_counter()
        target.forward([token_ids(w, target.vocab_size)])
        costs.verify.observe(w, time.perf_counter() - t)
        target.rollback([w])
    target.remove_rows([0])
    if draft is None:
        return
    _check(draft, "draft", 2)
    prefill = token_ids(min(PREFILL, draft.max_context - 1), draft.vocab_size)
    t = time.perf_counter()
    draft.add_rows(prefill, 1)
    costs.observe_catch_up(len(prefill), time.perf_counter() - t)
    draft.remove_rows([0])
    scratch = token_ids(min(SCRATCH, draft.max_context - 1), draft.vocab_size)
    capacity = getattr(draft, "max_rows", None)  # None: rows are only bounded by memory
    for rows in [r for r in widths[:4] if capacity is None or r <= capacity]:
        draft.add_rows(scratch, rows)
        t = time.perf_counter()
        draft.forward([token_ids(1, draft.vocab_size)] * rows, last_only=True)
        costs.draft.observe(rows, time.perf_counter() - t)
        draft.remove_rows(list(range(rows)))


def _check(runner: Runner, role: str, positions: int) -> None:
    if runner.vocab_size < 1:
        raise CalibrationError(f"the {role} model ({runner.backend}) reports a vocabulary of {runner.vocab_size} "
                               "tokens: it cannot score any token")
    if runner.max_context < positions:
        raise CalibrationError(f"the {role} model ({runner.backend}) holds {runner.max_context} positions; "
                               f"serving needs at least {positions}")
