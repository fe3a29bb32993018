"""No proposal: plain decoding through the same engine, the honest baseline."""

from __future__ import annotations

from .base import Proposal


class NoProposer:
    name = "none"
    sources = ("none",)
    uses_draft_model = False

    def join(self, rows) -> None:
        pass

    def leave(self, rows) -> None:
        pass

    def clear(self) -> None:
        pass

    def reach(self, row, k: int) -> dict[str, int]:
        return {"none": 0}

    def propose(self, rows, ks, sources, min_confidence) -> list[Proposal]:
        return [Proposal(tokens=[]) for _ in rows]
