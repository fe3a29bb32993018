"""The propose stage of a step: each proposer drafts for all of its rows at once, and each proposal
is fitted to its row's plan before the target scores it.

Fitting: a chain is cut to the plan's k, and a lookup's chain also to what the row's grammar allows
(a draft the grammar forbids has p = 0 and would be rejected for sure, so scoring it is waste); a
tree keeps its chain and the branches that pay for the wider pass at the measured verify cost
(verification/tree.trim).
"""

from __future__ import annotations

from collections.abc import Callable

from ..proposers.base import Plan, Proposal, Proposer
from ..verification.tree import subtree, trim

# The measured seconds of a pass of this many rows and this width, or None before any is measured
# (a tree then keeps all of its nodes).
VerifyCost = Callable[[int, int], float] | None


def propose(rows: list, plans: list[Plan], proposers: dict[str, Proposer], verify_cost: VerifyCost) -> list[Proposal]:
    """Every row's proposal, fitted to its plan (rows grouped by proposer, one call per proposer)."""
    out: list[Proposal | None] = [None] * len(rows)
    groups: dict[str, list[int]] = {}
    for b, r in enumerate(rows):
        groups.setdefault(r.proposer, []).append(b)
    for name, idx in groups.items():
        for b, proposal in zip(idx, proposers[name].propose([rows[b] for b in idx], [plans[b] for b in idx])):
            out[b] = fit(rows[b], plans[b], proposal, len(rows), verify_cost)
    return out


def fit(r, plan: Plan, proposal: Proposal, batch: int, verify_cost: VerifyCost) -> Proposal:
    """A chain cut to the plan (and, for a lookup's chain, to the grammar); a tree trimmed."""
    if proposal.parents is not None:
        return trimmed(r, proposal, batch, verify_cost)
    tokens = proposal.tokens[: plan.k]
    if r.matcher is not None and proposal.probs is None:
        tokens = tokens[: r.matcher.valid_prefix(tokens)]
    probs = None if proposal.probs is None else proposal.probs[: len(tokens)]
    source = (proposal.source or plan.source or r.proposer) if tokens else "none"
    return Proposal(tokens, probs, source, proposal.fed)


def trimmed(r, proposal: Proposal, batch: int, verify_cost: VerifyCost) -> Proposal:
    """A tree keeps its chain and the branches that pay for the wider pass over this many rows."""
    keep = trim(proposal.parents, proposal.shares or [1.0] * len(proposal.tokens), r.acceptance.conditional,
                (lambda width: verify_cost(batch, width)) if verify_cost is not None else None)
    if len(keep) == len(proposal.tokens):
        return proposal
    tokens, parents = subtree(proposal.tokens, proposal.parents, keep)
    probs = None if proposal.probs is None else proposal.probs[keep]
    return Proposal(tokens, probs, proposal.source, proposal.fed, parents,
                    [proposal.shares[i] for i in keep] if proposal.shares else None)
