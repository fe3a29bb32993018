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
        # k="auto" chooses between the sources pass by pass (adaptive.SourceChoice).
        self.sources = {"ngram": ngram, "draft": draft}

    def start(self, prompt_ids: list[int]) -> None:
        for source in self.sources.values():
            source.start(prompt_ids)

    def available(self, context: list[int], k: int) -> dict[str, int]:
        """How many tokens each source could draft now: the lookup's match, the model's k."""
        matched = self.sources["ngram"].propose(context, k, None, None).tokens
        return {"ngram": len(matched), "draft": k}

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator | None,
                min_confidence: float = 0.0) -> Proposal:
        lookup = self.sources["ngram"].propose(context, k, params, generator)
        if lookup.tokens:
            return Proposal(lookup.tokens, None, source="ngram")
        drafted = self.sources["draft"].propose(context, k, params, generator, min_confidence)
        return Proposal(drafted.tokens, drafted.probs, source="draft")
