"""A batch of sequences in one transformers KV cache, each row with its own position and length.

Rows accept different numbers of drafts, so their lengths drift apart. Instead of copying caches,
every row keeps a validity mask over the cache columns and its own next position: new tokens are
appended as new columns (right-padded across rows), rejected tokens are masked out, and RoPE gets
each row's true positions through position_ids. Columns no row uses any more are cropped.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from .hf import context_length, logit_width


class BatchRunner:
    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = logit_width(model)
        self.max_context = context_length(model)
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros((0, 0), dtype=torch.bool)  # [B, cache columns]
        self.pos = torch.zeros(0, dtype=torch.long)  # [B] tokens per row = next position id

    @property
    def batch_size(self) -> int:
        return self.valid.shape[0]

    @torch.inference_mode()
    def start_shared(self, prefix: list[int], rows: int) -> None:
        """All rows begin with the same prefix: prefill it once and repeat the cache."""
        self.cache = DynamicCache(config=self.model.config)
        self.valid = torch.ones((1, len(prefix)), dtype=torch.bool)
        self.pos = torch.tensor([len(prefix)])
        if prefix:
            self.model(input_ids=torch.tensor([prefix], device=self.device), past_key_values=self.cache,
                       use_cache=True, logits_to_keep=1)
        if rows > 1:
            self.cache.batch_repeat_interleave(rows)
        self.valid = self.valid.repeat(rows, 1)
        self.pos = self.pos.repeat(rows)

    @torch.inference_mode()
    def forward(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Append each row's tokens (possibly none). Returns float32 logits [B, S, V] for the new
        columns and the lengths [B]; positions past a row's length are padding."""
        if len(rows) != self.batch_size:
            raise ValueError(f"expected {self.batch_size} rows, got {len(rows)}")
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        width = int(lengths.max()) if len(rows) else 0
        if width == 0:
            return torch.zeros((len(rows), 0, self.vocab_size)), lengths
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        new_valid = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        position_ids = self.pos.unsqueeze(1) + torch.arange(width).unsqueeze(0)
        mask = torch.cat([self.valid, new_valid], dim=1)
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask.long().to(self.device),
            position_ids=position_ids.to(self.device),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.valid = mask
        self.pos = self.pos + lengths
        return out.logits.float(), lengths

    @torch.inference_mode()
    def rollback(self, drop: list[int] | torch.Tensor) -> None:
        """Forget the last drop[b] tokens of each row (rejected drafts)."""
        drop = torch.as_tensor(drop, dtype=torch.long)
        if drop.numel() == 0 or int(drop.max()) == 0:
            return
        # The i-th valid column from the end of row b is dropped when i < drop[b].
        from_end = self.valid.flip(1).long().cumsum(1).flip(1)  # valid columns at or after each column
        self.valid &= ~(self.valid & (from_end <= drop.unsqueeze(1)))
        self.pos = self.pos - drop
        used = self.valid.any(dim=0).nonzero()
        keep = int(used.max()) + 1 if used.numel() else 0
        unused_tail = self.valid.shape[1] - keep
        if unused_tail:
            self.cache.crop(-unused_tail)
            self.valid = self.valid[:, :keep]
