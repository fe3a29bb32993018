"""The interface every model backend implements for the engine and the draft proposer."""

from __future__ import annotations

from typing import Protocol

import torch


class ModelRunner(Protocol):
    """One sequence's causal LM state: the tokens in its KV cache, and how to extend or cut it."""

    vocab_size: int  # width of the logits it returns
    max_context: int  # positions the model supports
    backend: str  # what runs it, as reports name it: torch, torch-static, torch-compiled, llamacpp

    @property
    def length(self) -> int:
        """Number of tokens currently in the KV cache."""

    def reset(self) -> None:
        """Empty the cache for a new sequence."""

    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Append `tokens` to the cache; return float32 logits [n, V] for every new position, or
        [1, V] for the last one only (all_logits=False, which skips the unneeded LM-head work)."""

    def truncate(self, length: int) -> None:
        """Keep the first `length` cached tokens, dropping the rest (rejected drafts)."""
