"""A few timed passes to start the cost curves before real passes refine them (policy/costs.py)."""

from __future__ import annotations

import time

import torch

from ..models.backends.base import Runner
from .costs import PassCosts


@torch.inference_mode()
def calibrate(costs: PassCosts, target: Runner, draft: Runner | None = None,
              widths: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> None:
    """Target passes of growing width on one scratch row (the verify curve), a draft prefill (what
    a catch-up costs per token), and one-token draft steps over growing numbers of rows (the
    batched draft curve). The runners must hold no rows."""
    scratch = list(range(1, 17))
    target.add_rows(scratch)
    target.forward([[1]])  # warm-up, not booked
    target.rollback([1])
    for w in widths:
        t = time.perf_counter()
        target.forward([list(range(1, w + 1))])
        costs.verify.observe(w, time.perf_counter() - t)
        target.rollback([w])
    target.remove_rows([0])
    if draft is None:
        return
    prefill = list(range(1, 129))
    t = time.perf_counter()
    draft.add_rows(prefill, 1)
    costs.observe_catch_up(len(prefill), time.perf_counter() - t)
    draft.remove_rows([0])
    for rows in widths[:4]:
        draft.add_rows(scratch, rows)
        t = time.perf_counter()
        draft.forward([[1]] * rows, last_only=True)
        costs.draft.observe(rows, time.perf_counter() - t)
        draft.remove_rows(list(range(rows)))
