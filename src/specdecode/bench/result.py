"""What one bench run of one method on one prompt records: every method returns it (methods.py,
llama_server.py), and the runner aggregates them (runner.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Run:
    token_ids: list[int]
    total_s: float
    steps: list[tuple[float, int]]  # (end time since start, tokens emitted)
    peak_rss_bytes: int = 0
    cuda_peak_bytes: int | None = None
    target_passes: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    by_source: dict[str, list[int]] = field(default_factory=dict)  # passes, drafted, accepted per source
    tree: dict[str, int] = field(default_factory=dict)  # tree passes (stats.GenerationStats.tree)
    draft_s: float | None = None
    verify_s: float | None = None
    prefill_s: float | None = None
