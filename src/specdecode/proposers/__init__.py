"""Proposers: draft model, n-gram prompt lookup, both (hybrid), and none (plain decoding)."""

from .base import Proposal, Proposer
from .draft import DraftModelProposer
from .hybrid import HybridProposer
from .ngram import NgramProposer
from .none import NoProposer

PROPOSERS = ("draft", "ngram", "hybrid", "none")

__all__ = ["PROPOSERS", "DraftModelProposer", "HybridProposer", "NgramProposer", "NoProposer", "Proposal", "Proposer"]
