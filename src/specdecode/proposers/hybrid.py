"""Prompt lookup first, the draft model where the lookup finds nothing.

The two proposers are good at different text: lookup drafts long runs for nothing where the output
repeats its context (summaries, retrieval answers, code edits), and nothing at all elsewhere; the
draft model drafts everywhere, at a price per token. Asking the lookup first and the draft model
only when it has nothing keeps each where it pays. (llama.cpp's speculative example pairs an
n-gram cache with a draft model the same way.)

Exact, like any proposer: which source drafts depends only on the context (and, under k="auto",
on earlier passes), and each pass is verified with the q of the source that drafted it (one-hot
for the lookup, the draft's distributions for the model).
"""

from __future__ import annotations

from .base import Proposal
from .draft import DraftModelProposer
from .ngram import NgramProposer


class HybridProposer:
    name = "hybrid"
    uses_draft_model = True

    def __init__(self, ngram: NgramProposer, draft: DraftModelProposer):
        # k="auto" chooses between the sources pass by pass (adaptive.SourceChoice): the lookup's
        # match lengths (ngram3, ngram2, ngram1) and the draft model.
        self.ngram, self.draft = ngram, draft
        self.sources = (*ngram.sources, "draft")

    def join(self, rows) -> None:
        self.draft.join(rows)

    def leave(self, rows) -> None:
        self.draft.leave(rows)

    def clear(self) -> None:
        self.draft.clear()

    def reach(self, row, k: int) -> dict[str, int]:
        """How many tokens each source could draft now: the lookup's match, the model's k."""
        return {**self.ngram.reach(row, k), "draft": k}

    def propose(self, rows, ks, sources, min_confidence) -> list[Proposal]:
        out: list[Proposal | None] = [None] * len(rows)
        for i, (row, k, source) in enumerate(zip(rows, ks, sources)):
            if source != "draft":
                lookup = self.ngram.lookup(row.context, k)
                if lookup.tokens or source is not None:
                    out[i] = lookup
        rest = [i for i, p in enumerate(out) if p is None]
        drafted = self.draft.propose([rows[i] for i in rest], [ks[i] for i in rest], [None] * len(rest),
                                     [min_confidence[i] for i in rest])
        for i, proposal in zip(rest, drafted):
            out[i] = proposal
        return out
