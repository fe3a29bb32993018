"""The proposer interface: anything that guesses the next few tokens of many sequences at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..sampling.params import SamplingParams
from ..verification.invariant import RaceNoise
from ..verification.tree import chain_length, depths


class Row(Protocol):
    """What a proposer sees of a request in the batch (engine/row.Row)."""

    id: int
    context: list[int]  # prompt + everything emitted so far
    prompt_ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    invariant: bool  # drafter-invariant sampling: draft the race winner under noise(position)
    tenant: str | None  # whose memory of earlier outputs a suffix proposer may use (None: the shared one)
    remember: bool  # False: no memory of earlier outputs is read or fed for this row
    tree: int  # node budget for tree drafting (0: a chain)

    shaped: bool  # its logits depend on the text so far (penalties, logit bias, a grammar)

    def noise(self, position: int) -> RaceNoise:
        """The shared race noise of an absolute position (invariant rows only; verification/invariant.py)."""

    def shape_at(self, logits: torch.Tensor, extra: list[int]) -> torch.Tensor:
        """The row's penalties, bias and grammar mask applied to logits [V'] of the position after
        its context plus `extra`; a draft model applies it to its logits before drawing, so that q is
        shaped exactly as the target's p will be."""


@dataclass
class Plan:
    """What the step asks of a row's proposer for one pass (engine/step_plan.py decides it)."""

    k: int  # at most this many tokens; a tree at most this many levels deep
    source: str | None = None  # k="auto": the source that drafts this pass (None: the proposer's choice)
    nodes: int = 0  # a tree's node budget (0: a chain of k)
    # A draft model drafts no further after a position where its top probability is below this
    # (k="auto" rows; proposers.draft.next_draft).
    min_confidence: float = 0.0


@dataclass
class Proposal:
    tokens: list[int]  # at most k drafted tokens (possibly none)
    # The distributions the tokens were sampled from, [len(tokens), V_target] float32, or None when
    # the proposal is deterministic (q is one-hot on each token).
    probs: torch.Tensor | None = None
    source: str | None = None  # which source drafted it (e.g. ngram2, draft); None: nothing drafted
    # Context tokens processed before the first draft (a draft model catching up on what the
    # lookup drafted or plain passes emitted): a cost of the switch, not of each drafted token.
    fed: int = 1
    # A tree (verification/tree.py): each token's parent, an earlier index or -1 for the row's last context
    # token; None: a chain. The leading chain comes first, then the branches. probs then holds one
    # row per node (one-hot for a deterministic node), and shares each node's estimated fraction of
    # its parent's continuations, which tree.trim weighs against the pass's cost.
    parents: list[int] | None = None
    shares: list[float] | None = None

    def __post_init__(self) -> None:
        # A tree without branches is a chain: it goes the chain's way (block verification included).
        if self.parents is not None and chain_length(self.parents, len(self.tokens)) == len(self.tokens):
            self.parents = self.shares = None

    @property
    def chain(self) -> int:
        """Leading tokens that form a chain (all of them for a chain proposal): the drafting
        steps a draft model took."""
        return chain_length(self.parents, len(self.tokens))

    @property
    def levels(self) -> int:
        """Draft positions the proposal covers: a chain's length, a tree's depth."""
        return len(self.tokens) if self.parents is None else max(depths(self.parents), default=-1) + 1

    def feed_parents(self) -> list[int]:
        """Each fed position's parent in the target pass: the row's last context token first (the
        root, -1), then the drafts, whose indices move up by one behind it."""
        if self.parents is None:
            return list(range(-1, len(self.tokens)))
        return [-1] + [p + 1 for p in self.parents]

    @property
    def caught_up(self) -> bool:
        """The draft model first processed more than a normal pass feeds it (the last emitted token,
        plus the last draft of a fully accepted block): the pass timed a catch-up, not drafting."""
        return self.fed > 2


class Proposer(Protocol):
    """Batch-first: every call covers all of this proposer's rows in the step.

    Which tokens are proposed may depend on anything; exactness only requires that `probs` is the
    distribution each token was actually drawn from, and that a token once sampled is proposed.
    Hence min_confidence stops drafting *after* a position where the draft was unsure (its top
    probability there below the threshold) and keeps that token: a rule that dropped the sampled
    token because of its value would keep only some samples of q, and the kept ones would no longer
    follow q (the suite rejects that variant).
    """

    name: str
    # k="auto" chooses among these pass by pass, each with its own acceptance and cost (the lookup's
    # match lengths, the draft model).
    sources: tuple[str, ...]
    uses_draft_model: bool  # drafting costs draft-model passes (the load policy counts them)

    def join(self, rows: list[Row]) -> None:
        """Rows enter the batch (a draft model prefills their prompts here)."""

    def leave(self, rows: list[Row]) -> None:
        """Rows leave the batch; their state is freed."""

    def clear(self) -> None:
        """Forget every row (the engine starts from empty caches after a failed step)."""

    def reach(self, row: Row, k: int) -> dict[str, int]:
        """How many tokens (at most k) each source could draft for this row now."""

    def behind(self, row: Row) -> int:
        """Context tokens a draft model must process before it drafts for this row (its prefill of a
        row it has not seen, or what it missed while the row was not drafting); 0 for lookups."""

    def propose(self, rows: list[Row], plans: list[Plan]) -> list[Proposal]:
        """Up to plans[i].k tokens following rows[i].context, from plans[i].source; with
        plans[i].nodes > 0 a tree of at most that many nodes and k levels may come back (a proposer
        that cannot branch returns its chain)."""


class Stateless:
    """For proposers that keep nothing per row (the lookup reads the context each time)."""

    def join(self, rows) -> None:
        pass

    def leave(self, rows) -> None:
        pass

    def clear(self) -> None:
        pass

    def behind(self, row) -> int:
        return 0
