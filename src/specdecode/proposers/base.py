"""The proposer interface: anything that guesses the next few tokens of a sequence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..sampling import SamplingParams


@dataclass
class Proposal:
    tokens: list[int]  # at most k drafted tokens (possibly none)
    # The distributions the tokens were sampled from, [len(tokens), V_target] float32, or None when
    # the proposal is deterministic (q is one-hot on each token).
    probs: torch.Tensor | None = None
    source: str | None = None  # which source drafted it (e.g. ngram2; None: the proposer itself)
    # Context tokens processed before the first draft (a draft model catching up on what the
    # lookup drafted or plain passes emitted): a cost of the switch, not of each drafted token.
    fed: int = 1

    @property
    def caught_up(self) -> bool:
        """The draft model first processed more than a normal pass feeds it (the last emitted token,
        plus the last draft of a fully accepted block): the pass timed a catch-up, not drafting."""
        return self.fed > 2


class Proposer(Protocol):
    name: str

    def start(self, prompt_ids: list[int]) -> None:
        """A new sequence begins with these prompt tokens."""

    def propose(
        self,
        context: list[int],
        k: int,
        params: SamplingParams,
        generator: torch.Generator | None,
        min_confidence: float = 0.0,
    ) -> Proposal:
        """Guess up to k tokens following `context` (prompt + everything emitted so far).

        Which tokens are proposed may depend on anything; exactness only requires that `probs` is
        the distribution each token was actually drawn from, and that a token once sampled is
        proposed. Hence min_confidence stops drafting *after* a position where the draft was unsure
        (its top probability there below the threshold) and keeps that token: a rule that dropped the
        sampled token because of its value would keep only some samples of q, and the kept ones
        would no longer follow q (the suite rejects that variant).
        """
