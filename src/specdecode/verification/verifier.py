"""Verification: from the target's logits over a row's last token and its drafts to what it emits.

`Verifier` is the engine's one verification stage, built from its config; `verify(row, logits,
proposal)` picks the row's rule and returns a `Verdict` (tokens, logprobs, acceptance stats). The
rules: the standard rejection step over a chain (TokenVerifier, token by token or the block rule),
the drafter-invariant one (InvariantVerifier, verification/invariant.py), chosen per request, and the
multi-candidate walk over a tree of drafts (TreeVerifier, verification/tree.py).

The rule is `rejection.rejection_sample` (exact: the emitted tokens follow the target's p); the
engine takes the function at construction, so that `verify --naive` and the negative controls can
run the same engine with a wrong rule and show that the checks catch it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..proposers.base import Proposal
from .block import block_rejection_sample
from .invariant import race_argmax
from .logprobs import logprob_rows, pick
from .rejection import rejection_sample
from ..sampling.params import SamplingParams, argmax_ids, probs_from_logits
from .tree import Residual, exact_residual, walk, walk_invariant

RejectFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # rejection_sample's signature


@dataclass
class Verdict:
    tokens: list[int]  # accepted drafts, then one residual or bonus token
    accepted: int
    # Each draft's chance of acceptance min(1, p/q), which k=auto and `tune` learn from (see
    # stats.GenerationStats.expected_per_position).
    chances: list[float]
    path: list[int] | None = None  # a tree's accepted nodes, root to leaf (None: a chain's prefix)
    # Each emitted token's logprob entry (verification/logprobs.py), for a row that asked for them.
    logprobs: list | None = None

    def kept_rows(self) -> list[int]:
        """The pass's rows on the kept path: row 0 (the row's last context token, the root), then the
        accepted drafts' (draft i is row i + 1). The emitted tokens were drawn at these rows, and the
        target's cache keeps exactly these positions."""
        if self.path is not None:
            return [0] + [i + 1 for i in self.path]
        return list(range(self.accepted + 1))


class TokenVerifier:
    """Token-by-token verification of a chain of drafts."""

    name = "token"

    def __init__(self, reject: RejectFn = rejection_sample):
        self.reject = reject

    def __call__(self, logits: torch.Tensor, proposal: Proposal, params: SamplingParams,
                 generator: torch.Generator | None) -> Verdict:
        """logits [1 + len(drafts), V]: the target at the row's last token and at each draft."""
        drafts = proposal.tokens
        if params.greedy:
            return greedy_verdict(logits[: len(drafts) + 1], drafts)
        q = None if proposal.probs is None else proposal.probs[: len(drafts)].unsqueeze(0)
        p = probs_from_logits(logits[: len(drafts) + 1], params).unsqueeze(0)
        draft_ids = torch.tensor([drafts], dtype=torch.long).reshape(1, len(drafts))
        tokens, num_accepted = self.reject(draft_ids, q, p, generator)
        accepted = int(num_accepted[0])
        chances: list[float] = []
        if drafts:
            p_x = p[0, : len(drafts)].gather(-1, draft_ids[0].unsqueeze(-1)).squeeze(-1)
            q_x = torch.ones_like(p_x) if q is None else q[0].gather(-1, draft_ids[0].unsqueeze(-1)).squeeze(-1)
            chances = torch.where(q_x > 0, (p_x / q_x.clamp(min=1e-30)).clamp(max=1.0), torch.ones_like(p_x)).tolist()
        return Verdict(tokens[0, : accepted + 1].tolist(), accepted, chances)


def greedy_verdict(logits: torch.Tensor, drafts: list[int]) -> Verdict:
    """The rejection step (token-level or block) when p is one-hot on the argmax a: a draft x with
    q(x) > 0 is kept with chance min(1, p(x)/q(x)), 1 if x = a and 0 otherwise; the residual
    max(0, p - q) is then one-hot on a, as is the bonus draw from p. So: keep the drafts that equal
    the argmax, emit the argmax at the first that does not. Computed from the argmaxes alone, this
    skips the vocabulary-wide one-hot and random draw a sampled row needs (tests/test_rejection.py
    checks it against both rules)."""
    best = argmax_ids(logits)
    accepted = next((i for i, x in enumerate(drafts) if x != best[i]), len(drafts))
    chances = [1.0 if x == best[i] else 0.0 for i, x in enumerate(drafts)]
    return Verdict(drafts[:accepted] + [best[accepted]], accepted, chances)


class InvariantVerifier:
    """Accept a draft iff it is the target's Gumbel-max token at its position; emit that token at the
    first mismatch. Greedy requests never come here (greedy is the standard rule with one-hot p)."""

    name = "invariant"

    def __call__(self, logits: torch.Tensor, proposal: Proposal, params: SamplingParams, noise) -> Verdict:
        """logits [1 + len(drafts), V]; noise(i): the race noise of the i-th new position."""
        drafts = proposal.tokens
        p = probs_from_logits(logits[: len(drafts) + 1], params)
        tokens: list[int] = []
        for i in range(len(drafts) + 1):
            y = race_argmax(p[i], noise(i))
            tokens.append(y)
            if i == len(drafts) or drafts[i] != y:
                break
        accepted = len(tokens) - 1
        # A deterministic draft x had the chance p(x), as under the standard rule; for a sampled
        # draft no closed form is used: k=auto counts what happened (no chances).
        chances = [float(p[i, x]) for i, x in enumerate(drafts)] if proposal.probs is None else []
        return Verdict(tokens, accepted, chances)


class TreeVerifier:
    """A tree of drafts walked from the root with the multi-candidate rule (verification/tree.py)."""

    name = "tree"

    def __init__(self, residual: Residual = exact_residual):
        self.residual = residual

    def __call__(self, logits: torch.Tensor, proposal: Proposal, params: SamplingParams,
                 generator: torch.Generator | None, noise=None) -> Verdict:
        """logits [1 + nodes, V]: the target at the row's last token and at each node; noise(d):
        the race noise of the d-th new position for a drafter-invariant row (None: the rule)."""
        p = probs_from_logits(logits, params)
        if noise is not None:
            tokens, path = walk_invariant(proposal.tokens, proposal.parents, p,
                                          lambda probs, depth: race_argmax(probs, noise(depth)))
        else:
            tokens, path = walk(proposal.tokens, proposal.parents, proposal.probs, p, generator, self.residual)
        return Verdict(tokens, len(path), [], path)


class Verifier:
    """The verification stage: each row's rule on its own shaped logits, with its own generator.

    `reject` is the chain rule (`rejection_sample`; a wrong one only for negative controls, as is a
    wrong tree `residual`); "block" rows use the block rule, drafter-invariant rows the Gumbel rule,
    trees the multi-candidate walk."""

    def __init__(self, reject: RejectFn = rejection_sample, residual: Residual = exact_residual):
        self.chain = {"token": TokenVerifier(reject), "block": TokenVerifier(block_rejection_sample)}
        self.invariant = InvariantVerifier()
        self.tree = TreeVerifier(residual)

    def verify(self, r, logits: torch.Tensor, proposal: Proposal) -> Verdict:
        """One row of a pass: its penalties, bias and grammar shape every position first, by the text
        before it (as the draft's q was shaped: row.Row.shape; a tree's nodes by their own
        paths); then the tree walk, the drafter-invariant rule with the noise of its positions, or the
        token-level / block rejection step with the row's own generator; the emitted tokens' logprobs
        are read from the same rows (verification/logprobs.py)."""
        raw = logits[: len(proposal.tokens) + 1]
        shaped = r.shape(raw, proposal.tokens, proposal.parents)
        start = len(r.context)
        noise = (lambda i: r.noise(start + i)) if r.invariant else None
        if proposal.parents is not None:
            verdict = self.tree(shaped, proposal, r.params, r.generator, noise)
        elif noise is not None:
            verdict = self.invariant(shaped, proposal, r.params, noise)
        else:
            verdict = self.chain[r.request.verifier](shaped, proposal, r.params, r.generator)
        if r.request.logprobs is not None:
            rows = verdict.kept_rows()
            verdict.logprobs = pick(logprob_rows(raw[rows], shaped[rows], r.params, r.request.logprobs_mode),
                                    verdict.tokens, r.request.logprobs)
        return verdict
