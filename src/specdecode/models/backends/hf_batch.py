"""A batch of sequences in one transformers KV cache, each row with its own position and length.

Rows accept different numbers of drafts, so their lengths drift apart. Instead of copying caches,
every row keeps a validity mask over the cache columns and its own next position: new tokens are
appended as new columns (right-padded across rows), rejected tokens are masked out, and RoPE gets
each row's true positions through position_ids. Columns no row uses any more are cropped.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from .hf import context_length, logit_width
from .prefix_cache import PrefixCache


class BatchRunner:
    """Runner over a transformers model (any dtype, int8 included): one DynamicCache for all rows."""

    backend = "torch"
    trees = True  # forward() takes a tree of tokens per row (tree attention) and prune() keeps a path

    def __init__(self, model: PreTrainedModel, prefix_cache: int = 0):
        """prefix_cache: tokens of recent prompts whose KV is kept for prompts that start alike (0: off;
        prefix_cache.py). Models whose cache is not one plain layer per block (sliding windows) go
        without."""
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = logit_width(model)
        self.max_context = context_length(model)
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros((0, 0), dtype=torch.bool)  # [B, cache columns]
        self.pos = torch.zeros(0, dtype=torch.long)  # [B] tokens per row = next position id
        # Logits of the last fed position only, without the LM head over every position: the
        # decoder's hidden states are gathered first. Models that post-process their logits (soft
        # capping) go the plain way.
        self._split_head = (hasattr(model, "get_decoder") and model.get_output_embeddings() is not None
                            and getattr(model.config, "final_logit_softcapping", None) is None)
        self._tree_pass = None  # (first fed column, feed lengths, positions before) until prune()
        self.prefix_cache = None
        if prefix_cache and all(type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers):
            self.prefix_cache = PrefixCache(prefix_cache)

    @property
    def rows(self) -> int:
        return self.valid.shape[0]


    def length(self, row: int) -> int:
        return int(self.pos[row])

    @torch.inference_mode()
    def forward(self, feeds: list[list[int]], last_only: bool = False,
                parents: list[list[int]] | None = None) -> list[torch.Tensor]:
        """parents (tree attention): parents[b][j] is the index in feeds[b] of the token that feed
        token j follows, -1 for one that follows the row's cache; None: every feed is a chain.
        After a tree pass, `prune` says which fed tokens the row keeps."""
        if len(feeds) != self.rows:
            raise ValueError(f"expected {self.rows} rows, got {len(feeds)}")
        if parents is not None:
            return self._forward_tree(feeds, parents)
        lengths = torch.tensor([len(r) for r in feeds], dtype=torch.long)
        width = int(lengths.max()) if len(feeds) else 0
        if width == 0:
            return [torch.zeros((0, self.vocab_size)) for _ in feeds]
        ids = torch.zeros((len(feeds), width), dtype=torch.long)
        for b, r in enumerate(feeds):
            ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        new_valid = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        position_ids = self.pos.unsqueeze(1) + torch.arange(width).unsqueeze(0)
        mask = torch.cat([self.valid, new_valid], dim=1)
        # The model sees every new column as valid: a row's real tokens come before its padding, so
        # causality already hides the padding from them, and a padding query always has itself to
        # attend to (a row with no valid column at all would otherwise softmax over nothing -> NaN).
        seen = torch.cat([self.valid, torch.ones_like(new_valid)], dim=1)
        kwargs = dict(
            input_ids=ids.to(self.device),
            # All columns valid (one row, nothing rolled back): no mask, the plain causal path.
            attention_mask=None if bool(seen.all()) else seen.long().to(self.device),
            position_ids=position_ids.to(self.device),
            past_key_values=self.cache,
            use_cache=True,
        )
        last = (lengths - 1).clamp(min=0)
        if last_only and self._split_head:
            hidden = self.model.get_decoder()(**kwargs).last_hidden_state
            picked = hidden[torch.arange(len(feeds)), last.to(hidden.device)]
            logits = self.model.get_output_embeddings()(picked).float().cpu().unsqueeze(1)
        else:
            logits = self.model(**kwargs, logits_to_keep=1 if last_only and not bool((lengths != width).any())
                                else 0).logits.float().cpu()
            if last_only and logits.shape[1] > 1:
                logits = logits[torch.arange(len(feeds)), last.to(logits.device)].unsqueeze(1)
        self.valid = mask
        self.pos = self.pos + lengths
        if last_only:
            return [logits[b] if n else logits[b, :0] for b, n in enumerate(lengths.tolist())]
        return [logits[b, :n] for b, n in enumerate(lengths.tolist())]

    def _forward_tree(self, feeds: list[list[int]], parents: list[list[int]]) -> list[torch.Tensor]:
        """Every row's feed as a tree: a token sees the row's valid cache columns, its ancestors and
        itself, at the position of its depth (one 4D mask; the model's causal mask is not built)."""
        lengths = [len(r) for r in feeds]
        width = max(lengths, default=0)
        if width == 0:
            return [torch.zeros((0, self.vocab_size)) for _ in feeds]
        B = len(feeds)
        ids = torch.zeros((B, width), dtype=torch.long)
        sees = torch.zeros((B, width, width), dtype=torch.bool)
        depth = torch.zeros((B, width), dtype=torch.long)
        for b, (feed, up) in enumerate(zip(feeds, parents)):
            if len(up) != len(feed):
                raise ValueError(f"row {b}: {len(feed)} tokens but {len(up)} parents")
            ids[b, : len(feed)] = torch.tensor(feed, dtype=torch.long)
            for j, parent in enumerate(up):
                if not -1 <= parent < j:
                    raise ValueError(f"row {b}: token {j}'s parent must be an earlier token or -1, got {parent}")
                if parent >= 0:
                    sees[b, j] = sees[b, parent]
                    depth[b, j] = depth[b, parent] + 1
                sees[b, j, j] = True
            # A padding query sees itself, as in the chain path: never a softmax over nothing.
            sees[b].diagonal().fill_(True)
        new_valid = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        mask = torch.cat([self.valid.unsqueeze(1).expand(B, width, self.valid.shape[1]), sees], dim=2).unsqueeze(1)
        if getattr(self.model.config, "_attn_implementation", "sdpa") != "sdpa":
            # eager attention adds the mask to its scores
            dtype = next(self.model.parameters()).dtype
            mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
        logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                            position_ids=(self.pos.unsqueeze(1) + depth).to(self.device), past_key_values=self.cache,
                            use_cache=True).logits.float().cpu()
        self._tree_pass = (self.valid.shape[1], torch.tensor(lengths), self.pos.clone())
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self.pos = self.pos + torch.tensor(lengths)
        return [logits[b, :n] for b, n in enumerate(lengths)]

    @torch.inference_mode()
    def prune(self, keep: list[list[int]]) -> None:
        """After a tree pass: row b keeps the fed tokens keep[b] (indices into its feed, a path from
        its first token down), the others are dropped."""
        if self._tree_pass is None:
            raise RuntimeError("prune() follows a forward() with parents")
        start, lengths, pos = self._tree_pass
        self._tree_pass = None
        for b, kept in enumerate(keep):
            drop = torch.ones(int(lengths[b]), dtype=torch.bool)
            drop[list(kept)] = False
            self.valid[b, start: start + int(lengths[b])] &= ~drop
            self.pos[b] = pos[b] + len(kept)
        self._release_columns()

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
    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        """New rows join at the end: the prefix is prefilled once on its own (the other rows wait
        one prefill), repeated `count` times, and its cache columns are placed beside theirs, the
        shorter side padded with columns that are marked invalid."""
        if count < 1:
            return
        row = DynamicCache(config=self.model.config)
        if prefix:
            self._prefill(row, prefix)
            if count > 1:
                row.batch_repeat_interleave(count)
        if self.rows == 0:
            self.cache = row
            self.valid = torch.ones((count, len(prefix)), dtype=torch.bool)
            self.pos = torch.full((count,), len(prefix), dtype=torch.long)
            return
        width = max(self.valid.shape[1], len(prefix))
        B = self.rows
        for mine, theirs in zip(self.cache.layers, row.layers):
            ours_k, ours_v = _layer_kv(mine)
            new_k, new_v = _layer_kv(theirs)
            template = ours_k if ours_k is not None else new_k
            if template is None:
                continue  # no row has any column yet
            ours_k = _pad_columns(ours_k, template, B, width)
            ours_v = _pad_columns(ours_v, template, B, width)
            new_k = _pad_columns(new_k, template, count, width)
            new_v = _pad_columns(new_v, template, count, width)
            if not mine.is_initialized:
                mine.lazy_initialization(template, template)
            mine.keys = torch.cat([ours_k, new_k])
            mine.values = torch.cat([ours_v, new_v])
        valid = torch.zeros((B + count, width), dtype=torch.bool)
        valid[:B, : self.valid.shape[1]] = self.valid
        valid[B:, : len(prefix)] = True
        self.valid = valid
        self.pos = torch.cat([self.pos, torch.full((count,), len(prefix), dtype=torch.long)])

    def _prefill(self, row: DynamicCache, prefix: list[int]) -> None:
        """Fill a one-row cache with the prefix: what the prefix cache holds of it is copied in (a
        view; caches only ever grow by concatenation), the rest is computed."""
        start = 0
        if self.prefix_cache is not None:
            start, entry = self.prefix_cache.match(prefix)
            if entry is not None:
                for layer, (keys, values) in zip(row.layers, entry.layers):
                    layer.lazy_initialization(keys, values)
                    layer.keys, layer.values = keys[:, :, :start], values[:, :, :start]
        if start < len(prefix):
            self.model(input_ids=torch.tensor([prefix[start:]], device=self.device), past_key_values=row,
                       use_cache=True, logits_to_keep=1)
            if self.prefix_cache is not None:
                self.prefix_cache.store(prefix, [(layer.keys, layer.values) for layer in row.layers])

    @torch.inference_mode()
    def remove_rows(self, rows: list[int]) -> None:
        """Finished rows leave; their slots (and any columns only they used) are freed."""
        if not rows:
            return
        gone = set(rows)
        keep = [b for b in range(self.rows) if b not in gone]
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
