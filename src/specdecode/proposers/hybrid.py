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

import torch

from ..sampling import SamplingParams
from .base import Proposal
from .draft import DraftModelProposer
from .ngram import NgramProposer


class HybridProposer:
    name = "hybrid"

    def __init__(self, ngram: NgramProposer, draft: DraftModelProposer):
        # k="auto" chooses between the sources pass by pass (adaptive.SourceChoice): the lookup's
        # match lengths (ngram3, ngram2, ngram1) and the draft model.
        self.ngram, self.draft = ngram, draft
        self.sources = {**ngram.sources, "draft": draft}

    def start(self, prompt_ids: list[int]) -> None:
        self.ngram.start(prompt_ids)
        self.draft.start(prompt_ids)

    def available(self, context: list[int], k: int) -> dict[str, int]:
        """How many tokens each source could draft now: the lookup's match, the model's k."""
        return {**self.ngram.available(context, k), "draft": k}

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator | None,
                min_confidence: float = 0.0) -> Proposal:
        lookup = self.ngram.propose(context, k, params, generator)
        if lookup.tokens:
            return lookup
        drafted = self.draft.propose(context, k, params, generator, min_confidence)
        return Proposal(drafted.tokens, drafted.probs, source="draft")
