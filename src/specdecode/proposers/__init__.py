"""Proposers: draft model, n-gram prompt lookup, suffix decoding over recent outputs, a lookup with the
draft model where it finds nothing (hybrid, hybrid-suffix), and none (plain decoding)."""

from .base import Plan, Proposal, Proposer
from .draft import DraftModelProposer
from .hybrid import HybridProposer
from .ngram import NgramProposer
from .none import NoProposer
from .suffix import SuffixProposer

# The proposer a generator, the CLI, the server and the bench run unless told otherwise: the suffix
# index (this request's prompt and output, and recent outputs) where it matches, else the draft model.
# It drafts what the prompt lookup drafts and, on repetitive traffic, what earlier replies said
# (docs/performance.md, "the suffix hybrid against the n-gram hybrid").
DEFAULT_PROPOSER = "hybrid-suffix"
PROPOSERS = ("draft", "ngram", "suffix", "hybrid", "hybrid-suffix", "none")
# The proposers that need a draft model.
WITH_DRAFT = ("draft", "hybrid", "hybrid-suffix")

__all__ = ["DEFAULT_PROPOSER", "PROPOSERS", "WITH_DRAFT", "DraftModelProposer", "HybridProposer", "NgramProposer",
           "NoProposer", "Plan", "Proposal", "Proposer", "SuffixProposer"]
