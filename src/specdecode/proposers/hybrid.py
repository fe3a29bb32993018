"""A lookup first (prompt lookup or suffix decoding), the draft model where it finds nothing.

The two kinds of proposer are good at different text: a lookup drafts long runs for nothing where
the output repeats its context or earlier outputs (summaries, retrieval answers, code edits,
extraction into one schema), and nothing at all elsewhere; the draft model drafts everywhere, at a
price per token. Asking the lookup first and the draft model only when it has nothing keeps each
where it pays. (llama.cpp's speculative example pairs an n-gram cache with a draft model the same
way.) `hybrid` pairs the n-gram lookup with the draft, `hybrid-suffix` the suffix proposer.

Exact, like any proposer: which source drafts depends only on the context (and, under k="auto",
on earlier passes), and each pass is verified with the q of the source that drafted it (one-hot
for the lookup, the draft's distributions for the model).
"""

from __future__ import annotations

import dataclasses

from .base import Proposal, Proposer
from .draft import DraftModelProposer


class HybridProposer:
    uses_draft_model = True

    def __init__(self, lookup: Proposer, draft: DraftModelProposer, name: str = "hybrid"):
        # k="auto" chooses between the sources pass by pass (adaptive.SourceChoice): the lookup's
        # (ngram3..ngram1, or suffix16..suffix1) and the draft model.
        self.name = name
        self.lookup, self.draft = lookup, draft
        self.sources = (*lookup.sources, "draft")

    def join(self, rows) -> None:
        self.lookup.join(rows)
        self.draft.join(rows)

    def leave(self, rows) -> None:
        self.lookup.leave(rows)
        self.draft.leave(rows)

    def clear(self) -> None:
        self.lookup.clear()
        self.draft.clear()

    def behind(self, row) -> int:
        return self.draft.behind(row)

    def reach(self, row, k: int) -> dict[str, int]:
        """How many tokens each source could draft now: the lookup's match, the model's k."""
        return {**self.lookup.reach(row, k), "draft": k}

    def propose(self, rows, plans) -> list[Proposal]:
        """Each row's tree (nodes > 0) comes from the source that drafts it: the lookup's trie of
        its matches where it has one, the draft model's branches elsewhere."""
        out: list[Proposal | None] = [None] * len(rows)
        asked = [i for i, plan in enumerate(plans) if plan.source != "draft"]
        found = self.lookup.propose([rows[i] for i in asked], [plans[i] for i in asked])
        for i, proposal in zip(asked, found):
            if proposal.tokens or plans[i].source is not None:
                out[i] = proposal
        rest = [i for i, p in enumerate(out) if p is None]
        drafted = self.draft.propose([rows[i] for i in rest], [dataclasses.replace(plans[i], source=None) for i in rest])
        for i, proposal in zip(rest, drafted):
            out[i] = proposal
        return out
