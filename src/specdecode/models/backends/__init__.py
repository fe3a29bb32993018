"""Model runners: many sequences of a causal LM, each appending tokens and rolling back by position."""

from .base import Runner, SequenceRunner

__all__ = ["Runner", "SequenceRunner"]
