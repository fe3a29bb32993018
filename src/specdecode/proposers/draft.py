"""A smaller model of the same vocabulary drafts tokens autoregressively with its own KV cache."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models.backends.base import Runner
from ..policy.knobs import TreeKnobs
from ..verification.invariant import RaceNoise, race_argmax
from ..sampling.params import SamplingParams, argmax_ids, pad_vocab, probs_from_logits, sample_from
from .base import Proposal

# Draft tokens a row may be behind (while other rows draft) before it is re-prefilled alone.
REJOIN_AFTER = 16


class DraftModelProposer:
    """Draft k tokens per row by sampling from q with each row's own sampling params and generator.

    All rows draft together: one batched draft pass per position. Each row's draft cache keeps
    whatever it has processed; on each call the part that still agrees with the context is kept
    and the rest dropped, so rejected drafts roll back, and tokens the draft has not seen (the last
    draft of a fully accepted block, or what the lookup drafted for a hybrid row) are fed first
    (the catch-up). A row that fell far behind while others draft (long without drafting) is
    re-prefilled alone rather than padding every other row's first draft pass to its catch-up.

    context_window: the draft model sees only the last N prompt tokens (and everything after them).
    Its prefill is paid at a row's first drafting pass, and on a CPU it is not cheap (docs/backends.md): a
    draft guesses the next few tokens mostly from the last few hundred, and which tokens it proposes
    may depend on anything, so this changes acceptance, never the output distribution.
    """

    name = "draft"
    sources = ("draft",)
    uses_draft_model = True

    def __init__(self, runner: Runner, target_vocab: int, context_window: int | None = None,
                 tree: TreeKnobs = TreeKnobs()):
        if runner.vocab_size > target_vocab:
            raise ValueError(f"draft vocabulary {runner.vocab_size} is larger than the target's {target_vocab}")
        check_context_window(context_window)
        self.runner = runner
        self.tree = tree  # where a tree's draft branches
        self.target_vocab = target_vocab
        self.context_window = context_window or None
        self.order: list[int] = []  # request ids in the draft runner's row order
        self.state: dict[int, _DraftRow] = {}

    # -- rows in and out -------------------------------------------------------------------------

    def join(self, rows) -> None:
        """Nothing yet: a row's draft cache is prefilled at its first drafting pass (_start), so a
        request that never drafts (speculation off under load, a lookup that always finds a match)
        never pays the draft's prefill."""

    def _start(self, rows) -> None:
        """Prefill the (windowed) context but its last token of rows the draft has not seen; rows
        with the same text share one prefill (n samples of one prompt)."""
        groups: dict[tuple[int, ...], list] = {}
        for row in rows:
            offset = self._offset(row)
            self.state[row.id] = _DraftRow(offset, list(row.context[offset:-1]))
            groups.setdefault(tuple(row.context[offset:-1]), []).append(row)
        for prefix, members in groups.items():
            self.runner.add_rows(list(prefix), len(members))
            self.order.extend(r.id for r in members)

    def leave(self, rows) -> None:
        gone = {r.id for r in rows if r.id in self.state}
        if not gone:
            return
        self.runner.remove_rows([i for i, rid in enumerate(self.order) if rid in gone])
        self.order = [rid for rid in self.order if rid not in gone]
        for rid in gone:
            del self.state[rid]

    def clear(self) -> None:
        self.runner.remove_rows(list(range(len(self.order))))
        self.order, self.state = [], {}

    def reach(self, row, k: int) -> dict[str, int]:
        return {"draft": k}

    def behind(self, row) -> int:
        state = self.state.get(row.id)
        if state is None:
            return len(row.context) - 1 - self._offset(row)
        window = row.context[state.offset:]
        keep = common_prefix(state.cached, window, start=min(state.stable, len(state.cached)))
        return max(0, len(window) - 1 - keep)

    # -- drafting --------------------------------------------------------------------------------

    def propose(self, rows, plans) -> list[Proposal]:
        branches: dict[int, list[tuple[int, int, float]]] = {}  # row -> (depth, token, share)
        out = [Proposal(tokens=[]) for _ in rows]
        active = [i for i, plan in enumerate(plans) if plan.k > 0]
        if not active:
            return out
        fresh = [rows[i] for i in active if rows[i].id not in self.state]
        if len(active) > 1:
            for i in active:
                if rows[i].id in self.state and self.behind(rows[i]) > REJOIN_AFTER:
                    self.leave([rows[i]])
                    fresh.append(rows[i])
        self._start(fresh)
        started = {row.id for row in fresh}
        index = {rid: b for b, rid in enumerate(self.order)}
        feeds: list[list[int]] = [[] for _ in self.order]
        drop = [0] * len(self.order)
        goal = {}
        for i in active:
            row, state = rows[i], self.state[rows[i].id]
            window = row.context[state.offset:]  # the draft sees the window as if it were the whole text
            keep = common_prefix(state.cached, window, start=min(state.stable, len(state.cached)))
            keep = min(keep, len(window) - 1)  # the last token must be fed to get the next logits
            b = index[row.id]
            drop[b] = len(state.cached) - keep
            del state.cached[keep:]
            state.stable = len(window)
            feeds[b] = window[keep:]
            # A row prefilled just now fed its whole window: the pass timed a catch-up.
            out[i].fed = len(window) if row.id in started else len(feeds[b])
            out[i].source = "draft"
            goal[b] = (i, plans[i].k)
        self.runner.rollback(drop)
        probs: dict[int, list[torch.Tensor]] = {i: [] for i in active}
        while any(feeds):
            logits = self.runner.forward(feeds, last_only=True)
            for b, (i, k) in goal.items():
                if not feeds[b]:
                    continue
                row, state = rows[i], self.state[rows[i].id]
                state.cached.extend(feeds[b])
                noise = row.noise(len(row.context) + len(out[i].tokens)) if row.invariant else None
                shaped = self._shape(row, logits[b][-1], out[i].tokens)
                token, q, sure = next_draft(shaped, row.params, row.generator, self.target_vocab, plans[i].min_confidence,
                                             noise)
                if plans[i].nodes > k + len(branches.get(i, ())):  # a tree with room for siblings
                    for alternative in next_choices(shaped, q, token, self.tree):
                        if plans[i].nodes > k + len(branches.get(i, ())):
                            branches.setdefault(i, []).append((len(out[i].tokens), *alternative))
                out[i].tokens.append(token)
                if q is not None:
                    probs[i].append(q)
                feeds[b] = [token] if sure and len(out[i].tokens) < k else []
        for i in active:
            if probs[i]:
                out[i].probs = torch.stack(probs[i])
            if branches.get(i):
                add_branches(out[i], branches[i], self.target_vocab)
        return out

    @staticmethod
    def _shape(row, logits: torch.Tensor, drafted: list[int]) -> torch.Tensor:
        """The row's penalties and grammar at this position, as the target's logits get them in
        verification. Not needed for exactness (any q that the draft really drew from is exact) but
        for speed: a draft that ignored them would draft what the target may not emit."""
        return row.shape_at(logits, drafted) if row.shaped else logits

    def _offset(self, row) -> int:
        window = self.context_window
        return max(0, len(row.prompt_ids) - window) if window else 0

@dataclass
class _DraftRow:
    offset: int  # where in the context the draft's cache begins (the window's start)
    cached: list[int]  # tokens in the draft's cache row: context[offset:offset + len]
    stable: int = 0  # prefix of `cached` known to be verified context

    def __post_init__(self) -> None:
        self.stable = len(self.cached)


def next_draft(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None, target_vocab: int,
               min_confidence: float = 0.0, noise: RaceNoise | None = None) -> tuple[int, torch.Tensor | None, bool]:
    """The next drafted token from the draft's logits [V], the q it was drawn from (None when
    greedy: q is then one-hot), and whether to draft on after it: the draft's top probability at
    this position (at temperature 1) is at least min_confidence.

    The top probability, not the sampled token's: greedy they are the same, but when sampling, a
    draft that spreads its mass draws tokens it gives little probability most of the time even
    where target and draft agree and the next drafts are accepted (docs/choosing-k.md). How spread
    the draft is says how sure it is; which token the sampler drew is noise.

    The token is kept either way: its forward pass is paid for, and dropping a sampled draft
    because of its own value would keep only some samples of q (see Proposer.propose). Stopping
    after it only decides how many more tokens to draft, which may depend on everything drafted.
    """
    if params.greedy:
        token, q = argmax_ids(logits.reshape(-1))[0], None
    else:
        q = pad_vocab(probs_from_logits(logits, params), target_vocab)
        # Drafter-invariant sampling: the draft's race winner under the position's shared noise.
        token = race_argmax(q, noise) if noise is not None else int(sample_from(q, generator))
    sure = min_confidence <= 0 or float(torch.softmax(logits.float(), -1).max()) >= min_confidence
    return token, q, sure


def next_choices(logits: torch.Tensor, q: torch.Tensor | None, token: int,
                 knobs: TreeKnobs = TreeKnobs()) -> list[tuple[int, float]]:
    """(token, its share) of the draft's most likely tokens other than the drafted one, where the
    draft is unsure (the drafted token has less than knobs.branch_below of its mass); [] where it is
    sure. A sibling the draft gives almost nothing (below knobs.branch_above) is almost never what
    the target picks. Which of them are scored is the cost rule's call (tree.trim). The choice
    depends only on the draft's distribution and the drafted token, so as deterministic candidates
    tried after it the walk stays exact."""
    dist = q if q is not None else torch.softmax(logits.float(), -1)
    if float(dist[token]) >= knobs.branch_below:
        return []
    rest = dist.clone()
    rest[token] = -1.0
    shares, tokens = rest.topk(knobs.branches)
    return [(int(t), float(s)) for t, s in zip(tokens, shares) if float(s) >= knobs.branch_above]


def add_branches(proposal: Proposal, branches: list[tuple[int, int, float]], vocab: int) -> None:
    """The drafted chain plus each next choice as a leaf beside the chain's token at its depth
    (one-hot q: it was chosen, not sampled), tried after it in the order given."""
    chain = len(proposal.tokens)
    branches = [b for b in branches if b[0] < chain]
    proposal.parents = list(range(-1, chain - 1)) + [depth - 1 for depth, _, _ in branches]
    proposal.shares = [1.0] * chain + [share for _, _, share in branches]
    proposal.tokens = proposal.tokens + [token for _, token, _ in branches]
    if proposal.probs is not None:
        one_hot = torch.zeros((len(branches), vocab), dtype=proposal.probs.dtype)
        one_hot[torch.arange(len(branches)), torch.tensor([t for _, t, _ in branches])] = 1.0
        proposal.probs = torch.cat([proposal.probs, one_hot])


def check_context_window(window: int | None) -> None:
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 0):
        raise ValueError(f"the draft's context window is a number of prompt tokens >= 1 (0 or none: the whole "
                         f"prompt), got {window!r}")


def common_prefix(a: list[int], b: list[int], start: int = 0) -> int:
    n = min(len(a), len(b))
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return i
