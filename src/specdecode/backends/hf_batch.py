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
        # The model sees every new column as valid: a row's real tokens come before its padding, so
        # causality already hides the padding from them, and a padding query always has itself to
        # attend to (a row with no valid column at all would otherwise softmax over nothing -> NaN).
        seen = torch.cat([self.valid, torch.ones_like(new_valid)], dim=1)
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=seen.long().to(self.device),
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
        self._release_columns()

    # -- rows joining and leaving (continuous batching) ----------------------------------------------

    @torch.inference_mode()
    def add_row(self, prefix: list[int]) -> None:
        """A new row joins as the last one: its prefix is prefilled on its own (the other rows wait
        one prefill) and its cache columns are placed beside theirs, the shorter side padded with
        columns that are marked invalid."""
        row = DynamicCache(config=self.model.config)
        if prefix:
            self.model(input_ids=torch.tensor([prefix], device=self.device), past_key_values=row, use_cache=True,
                       logits_to_keep=1)
        if self.batch_size == 0:
            self.cache = row
            self.valid = torch.ones((1, len(prefix)), dtype=torch.bool)
            self.pos = torch.tensor([len(prefix)])
            return
        width = max(self.valid.shape[1], len(prefix))
        for mine, theirs in zip(self.cache.layers, row.layers):
            ours_k, ours_v = _layer_kv(mine)
            new_k, new_v = _layer_kv(theirs)
            template = ours_k if ours_k is not None else new_k
            if template is None:
                continue  # no row has any column yet
            B = self.batch_size
            ours_k = _pad_columns(ours_k, template, B, width)
            ours_v = _pad_columns(ours_v, template, B, width)
            new_k = _pad_columns(new_k, template, 1, width)
            new_v = _pad_columns(new_v, template, 1, width)
            if not mine.is_initialized:
                mine.lazy_initialization(template, template)
            mine.keys = torch.cat([ours_k, new_k])
            mine.values = torch.cat([ours_v, new_v])
        valid = torch.zeros((self.batch_size + 1, width), dtype=torch.bool)
        valid[:-1, : self.valid.shape[1]] = self.valid
        valid[-1, : len(prefix)] = True
        self.valid = valid
        self.pos = torch.cat([self.pos, torch.tensor([len(prefix)])])

    @torch.inference_mode()
    def remove_rows(self, rows: list[int]) -> None:
        """Finished rows leave; their slots (and any columns only they used) are freed."""
        if not rows:
            return
        keep = [b for b in range(self.batch_size) if b not in set(rows)]
        if not keep:
            self.cache = DynamicCache(config=self.model.config)
            self.valid = torch.zeros((0, 0), dtype=torch.bool)
            self.pos = torch.zeros(0, dtype=torch.long)
            return
        index = torch.tensor(keep, dtype=torch.long)
        for layer in self.cache.layers:
            if layer.is_initialized and layer.keys.numel():
                layer.keys = layer.keys[index.to(layer.keys.device)]
                layer.values = layer.values[index.to(layer.values.device)]
        self.valid = self.valid[index]
        self.pos = self.pos[index]
        self._release_columns()

    def _release_columns(self) -> None:
        """Crop the columns no row uses at the end (a view, no copy); compact the cache when more
        than half of its columns are dead (rows that left, rejected drafts), so that memory stays
        bounded however long the server runs."""
        used = self.valid.any(dim=0)
        if not used.any():
            keep = 0
        else:
            keep = int(used.nonzero().max()) + 1
        unused_tail = self.valid.shape[1] - keep
        if unused_tail:
            self.cache.crop(-unused_tail)
            self.valid = self.valid[:, :keep]
            used = used[:keep]
        live = int(used.sum())
        if keep >= 64 and live < keep // 2:
            index = used.nonzero().squeeze(1)
            for layer in self.cache.layers:
                if layer.is_initialized and layer.keys.numel():
                    layer.keys = layer.keys[:, :, index.to(layer.keys.device)]
                    layer.values = layer.values[:, :, index.to(layer.values.device)]
            self.valid = self.valid[:, index]

    @property
    def columns(self) -> int:
        return self.valid.shape[1]


def _layer_kv(layer) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if not layer.is_initialized or layer.keys is None or layer.keys.numel() == 0:
        return None, None
    return layer.keys, layer.values


def _pad_columns(t: torch.Tensor | None, template: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """t [rows, heads, cols, dim] padded with zero columns to `width` (None = no columns yet)."""
    if t is None:
        return template.new_zeros((rows, template.shape[1], width, template.shape[3]))
    if t.shape[2] == width:
        return t
    pad = t.new_zeros((rows, t.shape[1], width - t.shape[2], t.shape[3]))
    return torch.cat([t, pad], dim=2)
