"""Proposers: draft model, n-gram prompt lookup, suffix decoding over recent outputs, a lookup with the
draft model where it finds nothing (hybrid, hybrid-suffix), and none (plain decoding)."""

from .base import Plan, Proposal, Proposer
from .draft import DraftModelProposer
from .hybrid import HybridProposer
from .ngram import NgramProposer
from .none import NoProposer
from .suffix import SuffixProposer

PROPOSERS = ("draft", "ngram", "suffix", "hybrid", "hybrid-suffix", "none")
# The proposers that need a draft model.
WITH_DRAFT = ("draft", "hybrid", "hybrid-suffix")

__all__ = ["PROPOSERS", "WITH_DRAFT", "DraftModelProposer", "HybridProposer", "NgramProposer", "NoProposer", "Plan", "Proposal",
           "Proposer", "SuffixProposer"]
