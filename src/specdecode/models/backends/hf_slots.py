"""Batched rows in a preallocated KV cache, each row writing at its own positions; captured as CUDA
graphs on a GPU.

On a GPU a small-batch pass is launch-bound: hundreds of small kernels each wait on Python
(docs/gpu.md). A pass whose tensors never change shape can be recorded once as a CUDA graph and
replayed with one launch. This runner keeps every shape fixed, as gpt-fast does:

- the cache is one tensor per layer, [slots, KV heads, capacity, head dim], allocated once. Row b
  lives in slot b (rows stay packed: a row that leaves is closed up by copying the rows after it);
- a pass of width W writes row b's token j at position length[b] + j (a scatter with an index
  tensor, so the positions are data, not shape), and its query sees the columns at or before its
  own position (a [B, 1, W, capacity] mask built outside the graph);
- rows fed fewer than W tokens are padded: the padding writes past the row's end, where no query
  of that row looks, and is overwritten by the row's next real tokens;
- rolling back is moving a row's length back: nothing is copied or freed.

One graph is captured per (rows, width, capacity) the first time it is run, so k=auto's widths
each cost one capture; the capacity doubles (one copy) when a row needs more. On a CPU the same
function runs eagerly: its logic (positions, masks, rollback, rows joining and leaving) is what the
CPU test suite checks.

Logits come back as float32 on the CPU, where the engine samples from per-request generators: the
draws are the same whatever the device or the batch, so a seeded request's tokens do not depend on
its neighbours (one [W, V] copy per row per pass).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from .hf import context_length, logit_width


class SlotCache(Cache):
    """The cache the model writes through: per layer, keys and values [slots, heads, capacity, dim].

    `rows` (the slots a pass covers, a slice) and `write_at` ([B, W] positions) are set by the runner
    before each pass; the model's attention calls update(), which scatters the new keys and values
    there and returns the whole window of those rows."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        super().__init__(layers=[])  # our own storage; the per-layer classes are not used
        self.keys, self.values = keys, values
        self.rows = slice(0, 0)
        self.write_at: torch.Tensor | None = None

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        keys, values = self.keys[layer_idx][self.rows], self.values[layer_idx][self.rows]
        B, H, W, D = key_states.shape
        index = self.write_at[:, None, :, None].expand(B, H, W, D)
        keys.scatter_(2, index, key_states.to(keys.dtype))
        values.scatter_(2, index, value_states.to(values.dtype))
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always given; nothing reads this

    def get_mask_sizes(self, cache_position, layer_idx: int = 0) -> tuple[int, int]:
        return self.keys[layer_idx].shape[2], 0

    @property
    def is_compileable(self) -> bool:
        return True

    def __len__(self) -> int:
        return len(self.keys)


class SlotRunner:
    """Runner over a transformers model: static KV slots, per-row positions, CUDA graphs on a GPU."""

    trees = False  # tree passes need a mask per branch: BatchRunner (hf_batch.py) does them

    def __init__(self, model: PreTrainedModel, slots: int = 8, capacity: int = 1024, capture: bool | None = None):
        """capture: record each pass shape as a CUDA graph (default: when the model is on a GPU)."""
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.capture = self.device.type == "cuda" if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device")
        self.vocab_size = logit_width(model)
        self.max_context = context_length(model)
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self._layers = config.num_hidden_layers
        self._kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        self._head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self._eager_mask = getattr(config, "_attn_implementation", "sdpa") == "eager"
        self.lengths = torch.zeros(0, dtype=torch.long)
        self.cache = self._allocate(max(slots, 1), min(capacity, self.max_context))
        self._graphs: dict[tuple[int, int], _Graph] = {}

    @property
    def backend(self) -> str:
        return "torch-cudagraph" if self.capture else "torch-slots"

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def capacity(self) -> int:
        return self.cache.keys[0].shape[2]

    @property
    def slots(self) -> int:
        return self.cache.keys[0].shape[0]

    def length(self, row: int) -> int:
        return int(self.lengths[row])

    @property
    def captured_shapes(self) -> list[tuple[int, int]]:
        """(rows, width) of the passes recorded as graphs at the current capacity."""
        return sorted(self._graphs)

    # -- storage ----------------------------------------------------------------------------------

    def _allocate(self, slots: int, capacity: int) -> SlotCache:
        shape = (slots, self._kv_heads, capacity, self._head_dim)
        make = lambda: torch.zeros(shape, dtype=self.dtype, device=self.device)  # noqa: E731
        return SlotCache([make() for _ in range(self._layers)], [make() for _ in range(self._layers)])

    def _reserve(self, slots: int, positions: int) -> None:
        """Room for `slots` rows of `positions` tokens: doubling either copies the live part once,
        and the captured graphs (which point at the old tensors) are dropped."""
        if positions > self.max_context:
            raise ValueError(f"{positions} positions exceed the model's context of {self.max_context}")
        if slots <= self.slots and positions <= self.capacity:
            return
        new_slots, new_capacity = self.slots, self.capacity
        while new_slots < slots:
            new_slots *= 2
        while new_capacity < positions:
            new_capacity *= 2
        bigger = self._allocate(new_slots, min(new_capacity, self.max_context))
        live = int(self.lengths.max()) if self.rows else 0
        for old, new in zip(self.cache.keys + self.cache.values, bigger.keys + bigger.values):
            new[: self.rows, :, :live].copy_(old[: self.rows, :, :live])
        self.cache = bigger
        self._graphs.clear()

    # -- passes -----------------------------------------------------------------------------------

    def _inputs(self, ids: torch.Tensor, starts: torch.Tensor) -> dict[str, torch.Tensor]:
        """Positions and mask of a [B, W] pass whose rows start at `starts`."""
        B, W = ids.shape
        positions = starts.unsqueeze(1) + torch.arange(W).unsqueeze(0)
        sees = torch.arange(self.capacity).view(1, 1, 1, -1) <= positions.view(B, 1, W, 1)
        if self._eager_mask:  # eager attention adds the mask to its scores
            sees = torch.zeros(sees.shape, dtype=self.dtype).masked_fill(~sees, torch.finfo(self.dtype).min)
        return {"ids": ids.to(self.device), "positions": positions.to(self.device), "mask": sees.to(self.device)}

    def _pass(self, rows: slice, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model over one pass's inputs, writing into the slots `rows`: logits [B, W, V]."""
        self.cache.rows = rows
        self.cache.write_at = inputs["positions"]
        return self.model(input_ids=inputs["ids"], attention_mask=inputs["mask"], position_ids=inputs["positions"],
                          cache_position=inputs["positions"][0], past_key_values=self.cache, use_cache=True).logits

    @torch.inference_mode()
    def forward(self, feeds: list[list[int]], last_only: bool = False) -> list[torch.Tensor]:
        if len(feeds) != self.rows:
            raise ValueError(f"expected {self.rows} rows, got {len(feeds)}")
        counts = [len(feed) for feed in feeds]
        width = max(counts, default=0)
        if width == 0:
            return [torch.zeros((0, self.vocab_size)) for _ in feeds]
        self._reserve(self.rows, int(self.lengths.max()) + width)
        ids = torch.zeros((self.rows, width), dtype=torch.long)
        for b, feed in enumerate(feeds):
            ids[b, : len(feed)] = torch.tensor(feed, dtype=torch.long)
        inputs = self._inputs(ids, self.lengths)
        if self.capture:
            logits = self._replay(inputs)
        else:
            logits = self._pass(slice(0, self.rows), inputs)
        logits = logits.float().cpu()
        self.lengths = self.lengths + torch.tensor(counts, dtype=torch.long)
        if last_only:
            return [logits[b, n - 1: n] if n else logits[b, :0] for b, n in enumerate(counts)]
        return [logits[b, :n] for b, n in enumerate(counts)]

    def _replay(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        key = tuple(inputs["ids"].shape)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = _Graph(lambda x: self._pass(slice(0, key[0]), x), inputs)
        return graph.replay(inputs)

    @torch.inference_mode()
    def rollback(self, drop: list[int] | torch.Tensor) -> None:
        """Forget the last drop[b] tokens of each row: its length moves back, nothing else."""
        drop = torch.as_tensor(drop, dtype=torch.long)
        if bool((drop > self.lengths).any()) or bool((drop < 0).any()):
            raise ValueError(f"cannot roll back {drop.tolist()} tokens from rows of {self.lengths.tolist()}")
        self.lengths = self.lengths - drop

    # -- rows joining and leaving -----------------------------------------------------------------

    @torch.inference_mode()
    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        """`count` rows join at the end: the prefix is prefilled once into the first new slot (an
        eager pass: prompt lengths vary too much to capture) and copied into the others."""
        if count < 1:
            return
        first = self.rows
        self._reserve(first + count, len(prefix) + 1)
        if prefix:
            inputs = self._inputs(torch.tensor([prefix], dtype=torch.long), torch.zeros(1, dtype=torch.long))
            self._pass(slice(first, first + 1), inputs)
            for layer in self.cache.keys + self.cache.values:
                layer[first + 1: first + count, :, : len(prefix)].copy_(
                    layer[first: first + 1, :, : len(prefix)].expand(count - 1, -1, -1, -1))
        self.lengths = torch.cat([self.lengths, torch.full((count,), len(prefix), dtype=torch.long)])

    @torch.inference_mode()
    def remove_rows(self, rows: list[int]) -> None:
        """These rows leave; the rows after them move down into their slots (rows stay packed)."""
        gone = set(rows)
        keep = [b for b in range(self.rows) if b not in gone]
        if len(keep) == self.rows:
            return
        if keep:
            live = int(self.lengths[keep].max())
            index = torch.tensor(keep, device=self.device)
            for layer in self.cache.keys + self.cache.values:
                layer[: len(keep), :, :live] = layer[index, :, :live]
        self.lengths = self.lengths[keep] if keep else torch.zeros(0, dtype=torch.long)


class _Graph:
    """One pass shape recorded as a CUDA graph: inputs are copied into its static buffers, the
    graph is replayed, its output buffer read (and copied out by the caller before the next replay)."""

    def __init__(self, run, inputs: dict[str, torch.Tensor]):
        self.static = {name: tensor.clone() for name, tensor in inputs.items()}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside capture: lazy allocations, kernel selection
            run(self.static)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = run(self.static)

    def replay(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        for name, tensor in inputs.items():
            self.static[name].copy_(tensor)
        self.graph.replay()
        return self.output
