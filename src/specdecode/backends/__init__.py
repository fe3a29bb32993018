"""Model runners: a causal LM with a KV cache that can append tokens and roll back by position."""

from .base import ModelRunner

__all__ = ["ModelRunner"]
