"""No proposal: plain decoding through the same engine, the honest baseline."""

from __future__ import annotations

from .base import Proposal, Stateless


class NoProposer(Stateless):
    name = "none"
    sources = ("none",)
    uses_draft_model = False

    def reach(self, row, k: int) -> dict[str, int]:
        return {"none": 0}

    def propose(self, rows, plans) -> list[Proposal]:
        return [Proposal(tokens=[]) for _ in rows]
