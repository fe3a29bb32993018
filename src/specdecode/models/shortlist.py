"""Draft vocabulary shortlist (FR-Spec, Zhao et al. 2025; EAGLE-3 drafts over 32k tokens): the draft
scores only the N most frequent tokens, the target keeps its full vocabulary.

A small draft spends a large share of each token on its LM head: the 0.5B Qwen draft's output
matrix has 151,936 rows, a third of the bytes a llama.cpp Q4_0 draft token reads. Scoring only
the N rows of the most frequent tokens cuts that share by V / N. Exactness is untouched: the
draft's q is the softmax over the list and zero outside it, and that q is exactly what the drafts
were sampled from; a target token outside the list has q = 0 there, so it is never drafted and
the residual max(0, p - q) keeps all of its mass.

Which tokens: ranked by their count in a corpus tokenized with the model's own tokenizer (the
workloads shipped in the package and a fixed sample of Python's standard library: text and
code that are on every machine, no download), ties and unseen tokens by id (byte-level BPE ids
follow merge order, and earlier merges were the more frequent pairs of the tokenizer's own
corpus). Every special token is always in, and for llama.cpp the 256 byte tokens too (its loader
tokenizes a newline with the draft's own vocabulary).

The llama.cpp draft gets a GGUF of its own (written once with the `gguf` library, cached beside
the source) whose vocabulary is the list, in list order, and whose output matrix holds only those
rows; its input embeddings come from the source GGUF's full table, fed to llama.cpp as vectors
(a token outside the list still reads the right embedding). A transformers draft gets a
sliced LM head. Either way `Shortlisted` widens the logits back to the full vocabulary with -inf
outside the list, so the proposer, the sampling transforms and the rejection step see one
vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from .registry import ModelError, cache_dir, console, locked

BYTE_TOKENS = 256  # byte-level BPE vocabularies put their 256 byte tokens first
STDLIB_BYTES = 4 << 20  # how much of the standard library's source goes into the corpus


# -- which tokens ---------------------------------------------------------------------------------

def corpus_texts() -> list[str]:
    """The corpus the counts come from: the shipped workloads' prompts and the first STDLIB_BYTES
    of the standard library's modules in name order (the same on every install of a Python)."""
    texts = []
    data = resources.files("specdecode") / "data"
    for item in sorted(data.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".jsonl"):
            for line in item.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                texts += [t for t in record.get("turns") or [record.get("prompt", "")] if isinstance(t, str)]
    stdlib = Path(sys.modules["os"].__file__).parent
    budget = STDLIB_BYTES
    for path in sorted(stdlib.glob("*.py")):
        if budget <= 0:
            break
        text = path.read_text(encoding="utf-8", errors="replace")[:budget]
        texts.append(text)
        budget -= len(text)
    return texts


def token_counts(tokenizer, vocab_size: int) -> np.ndarray:
    """Each token's count in the corpus, cached per tokenizer (its vocabulary's hash)."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]
    path = cache_dir() / "shortlist" / f"counts-{digest}-{vocab_size}.npy"
    if path.is_file():
        return np.load(path)
    with console.status("counting token frequencies for the draft vocabulary shortlist (once, cached)"):
        counts = np.zeros(vocab_size, dtype=np.int64)
        for text in corpus_texts():
            ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
            ids = ids[ids < vocab_size]
            counts += np.bincount(ids, minlength=vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, counts)
    return counts


def choose(counts: np.ndarray, n: int, always: list[int]) -> np.ndarray:
    """The n ids to keep, ascending: `always`, then by count, ties by id."""
    vocab_size = len(counts)
    if n >= vocab_size:
        raise ModelError(f"a shortlist of {n} tokens is no shorter than the vocabulary ({vocab_size}): give fewer")
    keep = {i for i in always if 0 <= i < vocab_size}
    if len(keep) > n:
        raise ModelError(f"a shortlist of {n} tokens cannot hold the {len(keep)} tokens it must keep (special and "
                         "byte tokens): give more")
    order = np.lexsort((np.arange(vocab_size), -counts))  # count descending, then id ascending
    for i in order.tolist():
        if len(keep) >= n:
            break
        keep.add(i)
    return np.asarray(sorted(keep), dtype=np.int64)


def shortlist_for(tokenizer, vocab_size: int, n: int, byte_tokens: bool = False) -> np.ndarray:
    """The list for this tokenizer: its special tokens, the byte tokens if asked, the rest by count."""
    always = [int(i) for i in tokenizer.all_special_ids] + [int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})]
    if byte_tokens:
        always += range(BYTE_TOKENS)
    return choose(token_counts(tokenizer, vocab_size), n, always)


def coverage(ids: np.ndarray, tokens) -> float:
    """Share of `tokens` that are in the shortlist."""
    tokens = np.asarray(list(tokens), dtype=np.int64)
    return float(np.isin(tokens, ids).mean()) if tokens.size else 1.0


# -- the runner's view ----------------------------------------------------------------------------

def widen(logits: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[n, N] logits over the list -> [n, V], -inf outside it (q = 0 there after softmax)."""
    out = torch.full((logits.shape[0], vocab_size), float("-inf"), dtype=logits.dtype)
    out[:, ids] = logits
    return out


class Shortlisted:
    """A runner whose model scores only the shortlist (a sliced LM head, or a shortlisted GGUF),
    seen by everything above it as a runner over the full vocabulary."""

    def __init__(self, runner, ids: np.ndarray, vocab_size: int, source_gguf: Path | None = None):
        self.inner = runner
        # The full-vocabulary GGUF a llama.cpp draft was cut from: what a peer that loads model
        # files (llama-server's draft model) runs in its place, its own table being the whole one.
        self.source_gguf = source_gguf
        self.ids = torch.as_tensor(ids, dtype=torch.long)
        self.vocab_size = vocab_size
        self.max_context = runner.max_context
        self.backend = runner.backend
        self.shortlist = len(ids)  # reports name it beside the backend
        self.trees = getattr(runner, "trees", False)
        self.max_rows = getattr(runner, "max_rows", None)
        # Whose threads compute (base.Runner): the wrapped runtime's, so that a step over a
        # shortlisted llama.cpp draft runs torch on one thread as over the draft itself.
        self.own_threads = getattr(runner, "own_threads", False)

    @property
    def rows(self) -> int:
        return self.inner.rows

    def length(self, row: int) -> int:
        return self.inner.length(row)

    def add_rows(self, prefix: list[int], count: int = 1) -> None:
        self.inner.add_rows(prefix, count)

    def forward(self, feeds: list[list[int]], last_only: bool = False, **kwargs) -> list[torch.Tensor]:
        return [widen(x, self.ids, self.vocab_size) for x in self.inner.forward(feeds, last_only, **kwargs)]

    def rollback(self, drop: list[int]) -> None:
        self.inner.rollback(drop)

    def remove_rows(self, rows: list[int]) -> None:
        self.inner.remove_rows(rows)

    def prune(self, keep) -> None:
        self.inner.prune(keep)


def slice_head(model, ids: np.ndarray):
    """A transformers model whose LM head scores only `ids` (its input embeddings untouched)."""
    head = model.get_output_embeddings()
    if head is None or getattr(head, "bias", None) is not None:
        raise ModelError("this draft's LM head cannot be shortlisted (no plain linear output layer)")
    index = torch.as_tensor(ids, dtype=torch.long)
    small = torch.nn.Linear(head.in_features, len(ids), bias=False, dtype=head.weight.dtype)
    with torch.no_grad():
        small.weight.copy_(head.weight[index])
    model.config.tie_word_embeddings = False  # never re-tied to the full embedding table
    model.set_output_embeddings(small)
    return model


# -- the llama.cpp draft's GGUF -------------------------------------------------------------------

def shortlisted_gguf(source: Path, ids: np.ndarray) -> Path:
    """`source` with its vocabulary cut to `ids` (in that order) and its output matrix to those
    rows, written once beside it; the id list is written beside it too and checked on reuse."""
    import gguf

    out = source.with_name(f"{source.stem}+v{len(ids)}.gguf")
    ids_file = out.with_suffix(".ids.npy")
    with locked(f"shortlist-{out.name}"):
        if out.is_file() and ids_file.is_file() and np.array_equal(np.load(ids_file), ids):
            return out
        reader = gguf.GGUFReader(str(source))
        arch = reader.fields["general.architecture"].contents()
        tmp = out.with_suffix(".tmp")
        with console.status(f"writing {out.name}: the draft's vocabulary cut to {len(ids)} tokens (once, cached)"):
            writer = gguf.GGUFWriter(str(tmp), arch)
            _copy_metadata(reader, writer, ids)
            tensors = {t.name: t for t in reader.tensors}
            for t in reader.tensors:
                data = t.data
                if t.name in ("token_embd.weight", "output.weight"):
                    data = np.ascontiguousarray(data[ids])
                writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
            if "output.weight" not in tensors:  # tied: the embedding table is the output matrix
                embd = tensors["token_embd.weight"]
                writer.add_tensor("output.weight", np.ascontiguousarray(embd.data[ids]), raw_dtype=embd.tensor_type)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
        tmp.replace(out)
        np.save(ids_file, ids)
    return out


def _copy_metadata(reader, writer, ids: np.ndarray) -> None:
    """Every key of the source, the tokenizer's per-token arrays cut to the list and its special
    token ids renumbered into it (one outside the list is dropped)."""
    import gguf

    position = {int(old): new for new, old in enumerate(ids.tolist())}
    per_token = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        value = field.contents()
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        if name in per_token:
            value = [value[i] for i in ids.tolist()]
        elif name.startswith("tokenizer.ggml.") and name.endswith("_token_id"):
            if int(value) not in position:
                continue
            value = position[int(value)]
        writer.add_key_value(name, value, kind, sub_type=sub)


class EmbeddingTable:
    """Rows of a GGUF's token embedding table, dequantized on demand (what llama.cpp's own lookup
    computes), for feeding a shortlisted draft tokens that its own table no longer holds."""

    def __init__(self, source: Path):
        import gguf

        self._quants = gguf.quants
        tensor = next(t for t in gguf.GGUFReader(str(source)).tensors if t.name == "token_embd.weight")
        self.data, self.qtype = tensor.data, tensor.tensor_type
        self.width = int(tensor.shape[0])

    def rows(self, tokens: list[int]) -> np.ndarray:
        """float32 [len(tokens), width]."""
        picked = self.data[np.asarray(tokens, dtype=np.int64)]
        return np.ascontiguousarray(self._quants.dequantize(picked, self.qtype), dtype=np.float32).reshape(
            len(tokens), self.width)
