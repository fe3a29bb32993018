"""No proposal: plain decoding through the same engine, the honest baseline."""

from __future__ import annotations

from .base import Proposal


class NoProposer:
    name = "none"

    def start(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, context, k, params, generator, min_confidence: float = 0.0) -> Proposal:
        return Proposal(tokens=[])
