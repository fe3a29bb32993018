"""Choosing k at run time (k="auto"): a per-request controller and a confidence stop for drafts.

Both only change which tokens are proposed, never how they are verified, so speculation stays
exact. The controller follows transformers' assisted-generation heuristic (+2 after a fully
accepted block, -1 after a rejection); the draft additionally stops early when its top
probability for the next token falls below `min_confidence`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AdaptiveK:
    k_max: int = 8
    k: int = 4
    k_min: int = 1
    min_confidence: float = 0.4

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k <= k_max, got {self.k_min}, {self.k}, {self.k_max}")

    def update(self, drafted: int, accepted: int) -> None:
        """After a verification pass that checked `drafted` tokens and accepted `accepted`."""
        if drafted == 0:
            return
        if accepted == drafted:
            # Only a block that used the whole allowance says the allowance was too small.
            if drafted >= self.k:
                self.k = min(self.k_max, self.k + 2)
        else:
            self.k = max(self.k_min, self.k - 1)
