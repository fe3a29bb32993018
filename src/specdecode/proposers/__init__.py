"""Proposers: draft model, n-gram prompt lookup, and none (plain decoding)."""

from .base import Proposal, Proposer
from .draft import DraftModelProposer
from .ngram import NgramProposer
from .none import NoProposer

PROPOSERS = ("draft", "ngram", "none")

__all__ = ["PROPOSERS", "DraftModelProposer", "NgramProposer", "NoProposer", "Proposal", "Proposer"]
