"""The timing rule for every measurement that chooses something (target, draft, dtype, k): the
candidates take turns in rounds and each gets the median of its own times.

A shared machine's speed drifts by tens of percent within minutes; timing one candidate after the
other would read that drift as a difference between them. Taking turns puts the drift on all of
them alike, and the median drops the round a neighbour's burst fell on.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Iterable

from .backends.base import sampling_threads, torch_threads


def alternating_medians(tasks: dict[Hashable, Callable[[], None]], rounds: int, repeats: int = 1,
                        warmup_rounds: int = 0, serpentine: bool = False,
                        after: Callable[[Hashable], None] | None = None) -> dict[Hashable, float]:
    """Seconds per call of each task: `rounds` rounds, each calling every task `repeats` times in
    turn, and the median per task. `warmup_rounds` first rounds are not counted (kernels warm up);
    `serpentine`: every other round runs the tasks in reverse order (a slope across the order then
    cancels); `after(name)` runs untimed after each call (e.g. a rollback of what the call added)."""
    names = list(tasks)
    times: dict[Hashable, list[float]] = {name: [] for name in names}
    for r in range(warmup_rounds + rounds):
        for name in names[::-1] if serpentine and r % 2 else names:
            for _ in range(repeats):
                start = time.perf_counter()
                tasks[name]()
                elapsed = time.perf_counter() - start
                if after is not None:
                    after(name)
                if r >= warmup_rounds:
                    times[name].append(elapsed)
    return {name: statistics.median(t) for name, t in times.items()}


def as_engine_runs(runners: Iterable, call: Callable[[], object]) -> Callable[[], None]:
    """`call` under the torch threads an engine over `runners` would give it (backends.base.
    sampling_threads): timed otherwise, a runtime's pass would share the cores with torch threads
    that a generation puts to sleep, or the reverse."""
    n = sampling_threads(runners)

    def run() -> None:
        with torch_threads(n):
            call()
    return run


def branched(width: int) -> list[int]:
    """Parents of a two-branch tree of `width` fed tokens (index 0 the row's last token, -1 its parent):
    a chain that forks at the middle node, so a runner must use its tree mask to score it."""
    return [-1] + [0 if i == width // 2 else i - 1 for i in range(1, width)]


def pass_curve(runners: dict, ids: list[int], widths, rounds: int, trees: bool = False) -> dict:
    """Seconds of one target pass of w tokens, per (runner name, width) and, with `trees`, per
    (name, "tree", width) for runners that score trees (width >= 3): every runner holds one row
    already; each pass feeds ids[:w] to it and is rolled back untimed; all in alternating rounds."""
    tasks = {}
    for name, runner in runners.items():
        for w in widths:
            tasks[(name, w)] = as_engine_runs([runner], lambda r=runner, w=w: r.forward([ids[:w]]))
            if trees and w >= 3 and getattr(runner, "trees", False):
                tasks[(name, "tree", w)] = as_engine_runs(
                    [runner], lambda r=runner, w=w: r.forward([ids[:w]], parents=[branched(w)]))
    # A key's last element is its width: what the pass added, and the rollback removes.
    return alternating_medians(tasks, rounds, after=lambda key: runners[key[0]].rollback([key[-1]]))
