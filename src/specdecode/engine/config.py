"""The engine's settings: batch limits, the switches of its rules, and every policy number (their
groups live in policy/knobs.py, each field named by the rule it sets)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..policy.knobs import AcceptanceKnobs, AutoKKnobs, LoadCapKnobs, TreeKnobs
from ..verification.rejection import rejection_sample
from ..verification.tree import Residual, exact_residual
from ..verification.verifier import RejectFn


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 8  # rows decoded together; more requests wait
    max_waiting: int = 64  # queued requests beyond which submit() refuses (QueueFull)
    cost_rule: bool = True  # k="auto" keeps k where it pays at the measured costs; off: the controller alone
    load_policy: bool = True  # over several rows, cap k where speculation would slow the batch
    reject: RejectFn = rejection_sample  # the verification rule (a wrong one only for negative controls)
    tree_residual: Residual = exact_residual  # a tree walk's residual after a rejected candidate (ditto)
    auto_k: AutoKKnobs = field(default_factory=AutoKKnobs)
    load_cap: LoadCapKnobs = field(default_factory=LoadCapKnobs)
    acceptance: AcceptanceKnobs = field(default_factory=AcceptanceKnobs)
    tree: TreeKnobs = field(default_factory=TreeKnobs)

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.auto_k.k_max < 1:
            raise ValueError(f"auto_k.k_max must be >= 1, got {self.auto_k.k_max}")
