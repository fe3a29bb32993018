"""llama.cpp backend (optional extra `llamacpp`): a GGUF model run by llama-cpp-python.

It implements the same Runner protocol as the transformers backend, so it can be the draft, the
target, or both, for one row or many; our rejection step runs on the logits it returns. llama.cpp's
KV cache is indexed by position: rolling back rejected drafts removes the cache cells past the kept
length, nothing is copied.

We drive llama_decode ourselves instead of `Llama.eval`, because eval with logits_all computes the
LM head for every prompt token and keeps an n_ctx x vocab float array (2.5 GB for a 151k vocabulary
at 4096 positions); here logits are requested only for the positions a caller needs.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import weakref
from pathlib import Path

import numpy as np
import torch

from ..registry import ModelError
from ..spec import QUANTS
from . import ggml_thread, huge_pages
from .base import importable
from .llamacpp_trees import TreePasses, TreeRow  # noqa: F401 - TreeRow: a tree pass's layout
from .ggml_thread import system_info  # noqa: F401 - the build's CPU features, read by reports


def available() -> bool:
    return importable("llama_cpp")


def require() -> None:
    if not available():
        raise ModelError("the llama.cpp backend needs llama-cpp-python: pip install 'specdecode[llamacpp]' "
                         "(it builds llama.cpp from source, about 6 minutes on 2 cores)")


def requantized(gguf: Path, quant: str) -> Path:
    """The GGUF requantised to `quant` by llama.cpp's own quantiser (its rules: the layers' matrices
    take `quant`, the output projection keeps a higher precision), once; cached beside the original."""
    require()
    import llama_cpp

    from ..registry import locked

    out = gguf.with_name(f"{gguf.stem}@{quant}.gguf")
    with locked(f"quant-{out.name}"):
        if out.is_file():
            return out
        tmp = out.with_suffix(".tmp")
        from ..registry import console

        with console.status(f"requantising {gguf.name} to {quant} with llama.cpp (once, cached)"):
            quantize(gguf, tmp, quant)
        tmp.replace(out)
        return out


def quantize(gguf: Path, out: Path, quant: str, output_type: int | None = None) -> None:
    """Write `gguf` requantised to `quant` at `out` with llama.cpp's quantiser; output_type (a GGML
    type) sets the output projection's type instead of llama.cpp's rule."""
    require()
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTS[quant]
    params.allow_requantize = True
    params.quantize_output_tensor = True
    params.nthread = default_threads()
    if output_type is not None:
        params.output_tensor_type = output_type
    if llama_cpp.llama_model_quantize(str(gguf).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        out.unlink(missing_ok=True)
        raise ModelError(f"llama.cpp could not requantise {gguf} to {quant}")


def default_threads() -> int:
    return int(os.environ.get("SPECDECODE_LLAMACPP_THREADS") or len(os.sched_getaffinity(0)))


def gpu_offload() -> bool:
    """Whether the installed llama.cpp was built with a GPU backend it can offload layers to."""
    require()
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


# Attention as one fused operation, as llama.cpp's own programs run it (llama-server and llama-cli
# default to `--flash-attn auto`: on where the backend has it) and llama-cpp-python does not unless
# asked. The model's distributions either way, summed in another order; on a 2-core Zen 4 plain
# decoding of the Spec-Bench mix ran 8% faster with it, code 2% (docs/backends.md, "Flash attention").
# Our runner and the plain llama.cpp peers of `bench` load through load_llama, so both get it.
FLASH_ATTN = True


def load_llama(path: str | Path, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
               logits_all: bool = False, gpu: bool = False):
    """A llama_cpp.Llama over a GGUF file, quiet, with logits only where asked for (logits_all: for
    llama-cpp-python's own speculative generation, which keeps n_ctx rows of logits)."""
    require()
    from llama_cpp import Llama

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"no GGUF file at {path}")
    threads = n_threads or default_threads()
    try:
        llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads,
                    n_threads_batch=threads, logits_all=logits_all, verbose=False,
                    n_gpu_layers=-1 if gpu else 0, flash_attn=FLASH_ATTN)
    except (ValueError, RuntimeError) as exc:
        raise ModelError(f"llama.cpp could not load {path}: {exc}") from exc
    _OPEN.add(llm)
    return llm


N_BATCH = 512  # tokens per llama_decode call (llama.cpp's default)
# Runners still open when the interpreter exits are closed first: llama-cpp-python's own finalisers,
# run after its module globals are gone, print a traceback per model otherwise.
_OPEN: weakref.WeakSet = weakref.WeakSet()  # runners and Llama objects


@atexit.register
def _close_all() -> None:
    for owner in list(_OPEN):
        owner.close()


class LlamaCppRunner(TreePasses):
    """Runner over one llama.cpp context holding every row as its own sequence id.

    One `llama_batch` carries all rows' tokens of a pass, each token tagged with its row's sequence
    id and position, so that a verify pass over B rows is one llama_decode. Rollback removes the
    cells past a row's kept length (`llama_memory_seq_rm`); rows sharing a prompt are prefilled
    once and copied (`llama_memory_seq_cp`). The KV cells are unified: all rows draw from
    `total_ctx` cells (by default 4 x n_ctx), and one row may hold up to `n_ctx` positions.

    A tree pass (forward's `parents`) gives each branch a sequence id, the row's own or one of the
    `tree_seqs` ids no row holds (llama.cpp's 256 less max_rows), and `prune` keeps the accepted
    path under the row's id (llamacpp_trees.py).
    """

    backend = "llamacpp"
    own_threads = True  # llama.cpp computes on its own threads (base.Runner)
    # A row's prompt may come in the pass that scores its first drafts (forward's `unscored`): one
    # llama_decode instead of a prefill and then a one-token pass (base.Runner).
    prefills_in_pass = True
    trees = True  # forward(feeds, parents=...) scores trees, prune(keep) keeps a path (base.Runner)

    def __init__(self, llm, gguf: Path | None = None, n_ctx: int = 4096, max_rows: int = 16,
                 total_ctx: int | None = None, embeddings=None):
        import llama_cpp
        from llama_cpp import _internals

        self.llm = llm  # owns the weights; its own one-sequence context is left unused (and tiny)
        self.gguf = gguf
        self.vocab_size = int(llm.n_vocab())
        self.max_context = n_ctx
        self.max_rows = max_rows
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_ctx = total_ctx or n_ctx * min(max_rows, 4)
        spare = max(0, int(llama_cpp.llama_max_parallel_sequences()) - max_rows)
        self.tree_seqs = spare  # sequence ids beyond the rows', lent to the branches of a tree pass
        params.n_seq_max = max_rows + spare
        params.kv_unified = True
        # Sized for this context, not inherited from the tiny one `llm` was opened with: batches of
        # N_BATCH tokens (prefill at llama.cpp's own chunk size), and logits for every token of a
        # batch from any row (a verify pass over several rows wants k + 1 from each; llama.cpp
        # aborts the process when a batch asks for more outputs than the context was built for).
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_outputs_max = N_BATCH
        params.n_outputs_max_per_seq = 0  # 0: up to n_outputs_max
        self._ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
        self._lib = llama_cpp
        self._n_batch = int(params.n_batch)
        # embeddings (a shortlist.EmbeddingTable): tokens go in as their embedding vectors, looked
        # up in a table other than the model's own (a shortlisted draft's holds only its list).
        self._embeddings = embeddings
        # Room for a tree node's sequence ids: every branch through it.
        self._batch = llama_cpp.llama_batch_init(self._n_batch, embeddings.width if embeddings else 0, spare + 1)
        self._free = list(range(max_rows - 1, -1, -1))  # sequence ids not in use
        self._spare = list(range(max_rows + spare - 1, max_rows - 1, -1))  # ids a tree pass may lend a branch
        self._tree: list[TreeRow] | None = None  # the tree pass waiting for prune
        _OPEN.add(self)
        self.seq: list[int] = []  # sequence id of each row
        self.lengths: list[int] = []
        self.huge_page_bytes = 0  # of the weights, on 2 MB pages (load)

    def close(self) -> None:
        """Free the batch, the context and the weights now, while the library is still loaded."""
        self._free_batch()
        for owner in (getattr(self, "_ctx", None), getattr(self, "llm", None)):
            if owner is not None:
                owner.close()

    def __del__(self):
        self._free_batch()

    def _free_batch(self) -> None:
        batch, self._batch = getattr(self, "_batch", None), None
        # At interpreter exit the library's functions may already be gone (None).
        if batch is not None and getattr(self._lib, "llama_batch_free", None) is not None:
            self._lib.llama_batch_free(batch)

    @classmethod
    def load(cls, path: str | Path, n_ctx: int = 4096, n_threads: int | None = None,
             max_rows: int = 16, embeddings=None, gpu: bool = False) -> "LlamaCppRunner":
        """gpu: every layer offloaded to the GPU (a build with GPU offload: gpu_offload()). The
        weights llama.cpp copies into memory of its own go onto huge pages (huge_pages.py)."""
        with huge_pages.collapsed() as moved:
            llm = load_llama(path, n_ctx=64, n_threads=n_threads, gpu=gpu)
        runner = cls(llm, Path(path), n_ctx=n_ctx, max_rows=max_rows, embeddings=embeddings)
        runner.huge_page_bytes = moved.bytes
        return runner

    @staticmethod
    def vocab_of(path: Path) -> int:
        """Rows of a GGUF's output matrix (the logits' width), read from its header."""
        import gguf

        tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
        return int((tensors.get("output.weight") or tensors["token_embd.weight"]).shape[1])

    @property
    def rows(self) -> int:
        return len(self.seq)

    def length(self, row: int) -> int:
        return self.lengths[row]

    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        if count > len(self._free):
            raise ValueError(f"the llama.cpp runner holds at most {self.max_rows} rows: load it with more")
        if len(prefix) > self.max_context:
            raise ValueError(f"{len(prefix)} tokens do not fit the llama.cpp context of {self.max_context}")
        first = self._free.pop()
        self.seq.append(first)
        self.lengths.append(0)
        if prefix:
            self._decode([(len(self.seq) - 1, prefix)], last_only=True)
        for _ in range(count - 1):
            sid = self._free.pop()
            self._lib.llama_memory_seq_cp(self._ctx.memory, first, sid, -1, -1)
            self.seq.append(sid)
            self.lengths.append(len(prefix))

    def forward(self, feeds: list[list[int]], last_only: bool = False,
                unscored: list[int] | None = None, parents: list[list[int]] | None = None) -> list[torch.Tensor]:
        """parents (a tree pass): parents[b][j] is the index in feeds[b] of the token that feed token
        j follows, -1 for one that follows the row's cache; every position's logits come back, and
        `prune` then says which fed tokens each row keeps."""
        if len(feeds) != self.rows:
            raise ValueError(f"expected {self.rows} rows, got {len(feeds)}")
        if self._tree is not None:
            raise RuntimeError("prune() the last tree pass before the next forward()")
        for b, feed in enumerate(feeds):
            if self.lengths[b] + len(feed) > self.max_context:
                raise ValueError(f"{self.lengths[b] + len(feed)} tokens do not fit the llama.cpp context of "
                                 f"{self.max_context}: load it with a larger n_ctx")
        if parents is None:
            return self._decode([(b, feed) for b, feed in enumerate(feeds)], last_only, unscored)
        return self._forward_tree(feeds, parents)

    def rollback(self, drop: list[int]) -> None:
        """Forget the last drop[b] tokens of each row. After a tree pass (not pruned) a row's fed
        tokens count as its last ones, and may only be dropped whole."""
        drop = self._drop_tree(drop)
        for b, d in enumerate(drop):
            if d:
                self.lengths[b] -= d
                self._lib.llama_memory_seq_rm(self._ctx.memory, self.seq[b], self.lengths[b], -1)

    def remove_rows(self, rows: list[int]) -> None:
        self._end_tree()  # a tree pass not pruned (a step that failed) is dropped with its rows
        gone = set(rows)
        for b in sorted(gone):
            self._lib.llama_memory_seq_rm(self._ctx.memory, self.seq[b], -1, -1)
            self._free.append(self.seq[b])
        self.seq = [s for b, s in enumerate(self.seq) if b not in gone]
        self.lengths = [n for b, n in enumerate(self.lengths) if b not in gone]
        if not self.seq:
            # Empty: start the cells over. llama.cpp places new tokens from a moving head, so cells
            # freed by rollbacks and finished rows leave the used range spread over more of the
            # cache, and every pass attends over that range (docs/backends.md measures it).
            self._lib.llama_memory_clear(self._ctx.memory, False)

    def _decode(self, feeds: list[tuple[int, list[int]]], last_only: bool,
                unscored: list[int] | None = None, trees: list["TreeRow"] | None = None) -> list[torch.Tensor]:
        """Every (row, tokens) in as few llama_decode calls as n_batch allows; logits where wanted
        (none for the first unscored[row] tokens of a row). With trees, token j of row b goes at
        the position of its depth with the ids of its branches, a row's tree in one call (branch
        ids that share tokens must stay level in the cache), and the row's length waits for prune."""
        wanted: list[tuple[int, int]] = []  # (row, index in the llama_batch) of each logit wanted
        out: dict[int, list[torch.Tensor]] = {b: [] for b, _ in feeds}  # per row, its logits per llama_decode
        batch, n = self._batch, 0

        fed: list[int] = []

        def flush():
            nonlocal n
            if n == 0:
                return
            batch.n_tokens = n
            if self._embeddings is not None:
                vectors = self._embeddings.rows(fed)
                ctypes.memmove(batch.embd, vectors.ctypes.data, vectors.nbytes)
                fed.clear()
            code = ggml_thread.run(self._lib.llama_decode, self._ctx.ctx, batch)
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code} (no free KV cells: fewer rows or a larger "
                                   "context)" if code == 1 else f"llama_decode returned {code}")
            views: dict[int, list[np.ndarray]] = {}
            for b, i in wanted:  # llama_get_logits_ith takes the token's index in the batch
                ptr = self._lib.llama_get_logits_ith(self._ctx.ctx, i)
                views.setdefault(b, []).append(np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)))
            for b, rows in views.items():  # one copy out of llama.cpp's buffer, which the next decode overwrites
                out[b].append(torch.from_numpy(np.stack(rows)))
            wanted.clear()
            n = 0

        for b, tokens in feeds:
            if trees is not None and n + len(tokens) > self._n_batch:
                flush()
            for j, token in enumerate(tokens):
                if n == self._n_batch:
                    flush()
                keep = (j == len(tokens) - 1 or not last_only) and (unscored is None or j >= unscored[b])
                if self._embeddings is not None:
                    fed.append(token)
                else:
                    batch.token[n] = token
                if trees is None:
                    batch.pos[n] = self.lengths[b] + j
                    batch.n_seq_id[n] = 1
                    batch.seq_id[n][0] = self.seq[b]
                else:
                    tree = trees[b]
                    batch.pos[n] = tree.start + tree.depth[j]
                    batch.n_seq_id[n] = len(tree.through[j])
                    for s, leaf in enumerate(tree.through[j]):
                        batch.seq_id[n][s] = tree.seqs[leaf]
                batch.logits[n] = keep
                if keep:
                    wanted.append((b, n))
                n += 1
            if trees is None:
                self.lengths[b] += len(tokens)
        flush()
        return [torch.cat(out[b]) if len(out[b]) > 1 else out[b][0] if out[b] else torch.zeros((0, self.vocab_size))
                for b, _ in feeds]
