"""Build a SpeculativeGenerator from model specs or already-loaded transformers models."""

from __future__ import annotations

from .backends.hf import load_model, logit_width, parse_dtype, world_size
from .backends.hf_batch import BatchRunner
from .backends.serial import SerialRunner
from .engine import Engine, EngineConfig
from . import draft_choice, shortlist
from .models import ModelError, check_vocab_compatible, resolve, split_backend
from .proposers import PROPOSERS, WITH_DRAFT, DraftModelProposer, HybridProposer, NgramProposer, NoProposer, SuffixProposer


class SpeculativeGenerator(Engine):
    """The engine (engine.Engine), with constructors that load the models."""

    @classmethod
    def from_pretrained(cls, target: str = "default", draft: str | None = "auto", proposer: str = "draft",
                        dtype: str = "auto", **options) -> "SpeculativeGenerator":
        """Load models by spec ('default', a directory, a .gguf file, a cached Hugging Face id).
        The draft "auto" is the default draft on the runtime measured fastest beside this target on
        this machine (draft_choice.py; measured on first use, cached).

        `draft` is ignored unless the proposer needs a draft model. Every generator can also run
        "ngram", "suffix" and "none" per request. Options: draft_dtype, ngram_max, ngram_min,
        draft_context, suffix_memory (tokens of recent outputs the suffix proposer keeps),
        prefix_cache (tokens of recent prompts whose KV is kept), config (engine.EngineConfig).
        """
        return load_generator(target=target, draft=draft, proposer=proposer, dtype=dtype, **options)

    @classmethod
    def from_models(cls, target_model, tokenizer, proposer: str = "draft", draft_model=None, draft_tokenizer=None,
                    **options) -> "SpeculativeGenerator":
        """Wrap already-loaded transformers models or runners (e.g. built from a config in a test)."""
        return build_generator(target_model, tokenizer, proposer, draft_model, draft_tokenizer, **options)


def load_generator(
    target: str = "default",
    draft: str | None = "auto",
    proposer: str = "draft",
    dtype: str = "auto",
    draft_dtype: str | None = None,
    config: EngineConfig | None = None,
    **options,
) -> SpeculativeGenerator:
    """draft_dtype defaults to dtype; int8 drafts are cheap and cost nothing in exactness. Options
    are build_generator's (ngram_max, ngram_min, draft_context, suffix_memory, prefix_cache)."""
    _check_proposer(proposer)
    config = config or EngineConfig()
    target_model, tokenizer, draft_model, draft_tokenizer = load_models(
        target, draft if proposer in WITH_DRAFT else None, dtype, draft_dtype, max_rows=config.max_batch
    )
    gen = build_generator(target_model, tokenizer, proposer, draft_model, draft_tokenizer, config=config, **options)
    if draft_model is not None and draft.strip() == draft_choice.AUTO:  # measured and cached by load_models
        chosen = choose_draft(target, target_model, tokenizer, dtype, draft_dtype)
        gen.info["draft_choice"] = {"choice": chosen["choice"], "why": chosen["why"]}
        draft = chosen["choice"]
    gen.info.update(target=target, draft=draft if draft_model is not None else None, dtype=parse_dtype(dtype),
                    draft_dtype=parse_dtype(draft_dtype or dtype) if draft_model is not None else None)
    return gen


def load_models(target: str, draft: str | None, dtype: str = "auto", draft_dtype: str | None = None,
                max_rows: int = 8):
    """(target model, tokenizer, draft model or None, draft tokenizer or None), vocabularies checked;
    llama.cpp models come as runners with room for max_rows rows (and a scratch row)."""
    dtype = parse_dtype(dtype)
    draft_dtype = parse_dtype(draft_dtype or dtype)
    target_model, tokenizer = _load(target, "target", dtype, max_rows)
    if not draft:
        return target_model, tokenizer, None, None
    if draft.strip() == draft_choice.AUTO:
        draft = choose_draft(target, target_model, tokenizer, dtype, draft_dtype)["choice"]
    return (target_model, tokenizer, *load_draft(draft, draft_dtype, target_model, tokenizer, max_rows))


def choose_draft(target: str, target_model, tokenizer, dtype: str, draft_dtype: str | None = None) -> dict:
    """What `--draft auto` runs beside this target here: draft_choice's measured pick (cached)."""
    import sys

    return draft_choice.choose(target, target_model, tokenizer, parse_dtype(dtype), parse_dtype(draft_dtype or dtype),
                               log=lambda line: print(line, file=sys.stderr))


def load_draft(spec: str, dtype: str, target_model, tokenizer, max_rows: int = 8):
    """(draft model or runner, its tokenizer), checked against the target's vocabulary."""
    draft_model, draft_tokenizer = _load(spec, "draft", parse_dtype(dtype), max_rows)
    check_vocab_compatible(tokenizer, draft_tokenizer, vocab_width(target_model), vocab_width(draft_model))
    return draft_model, draft_tokenizer


def is_runner(model) -> bool:
    """A runner (every runner names its backend), not a bare transformers model."""
    return hasattr(model, "backend")


def as_runner(model, prefix_cache: int = 0):
    """A batch Runner: transformers models get one cache for all rows (and a prefix cache of that
    many tokens), single-sequence runners run their rows one after another, batch runners pass
    through."""
    if not is_runner(model):
        return BatchRunner(model, prefix_cache=prefix_cache)
    return model if hasattr(model, "add_rows") else SerialRunner(model)


def vocab_width(model) -> int:
    return model.vocab_size if is_runner(model) else logit_width(model)


def backend_name(model) -> str:
    """The backend running a model or runner, as the bench reports it."""
    return model.backend if is_runner(model) else "torch"


def torch_model(model):
    """The transformers model behind a model or a torch runner (None for other backends)."""
    if not is_runner(model):
        return model
    return getattr(model, "model", None) if model.backend.startswith("torch") else None


def backend_of(spec: str) -> str:
    """hf or llamacpp, as the spec's prefix says; unprefixed, a .gguf file given by path goes to
    llama.cpp when it is installed (bundled names and "default" stay on transformers)."""
    backend, name = split_backend(spec.strip())
    if backend is not None:
        return backend
    if name.endswith(".gguf"):
        from .backends import llamacpp

        return "llamacpp" if llamacpp.available() else "hf"
    return "hf"


def build_generator(
    target_model,
    tokenizer,
    proposer: str = "draft",
    draft_model=None,
    draft_tokenizer=None,
    ngram_max: int = 3,
    ngram_min: int = 1,
    draft_context: int | None = None,
    suffix_memory: int = 100_000,
    prefix_cache: int = 0,
    config: EngineConfig | None = None,
) -> SpeculativeGenerator:
    """The generator over loaded models. Every generator can also run `ngram`, `suffix` and `none`
    per request; `draft`, `hybrid` and `hybrid-suffix` (a lookup first, else the draft) when a draft
    model is given. suffix_memory: tokens of recent outputs the suffix proposer keeps (0: none);
    prefix_cache: tokens of recent prompts whose KV the transformers target and draft keep, each
    (0: none; backends/prefix_cache.py)."""
    _check_proposer(proposer)
    runner = as_runner(target_model, prefix_cache)
    proposers = {"none": NoProposer(), "ngram": NgramProposer(max_n=ngram_max, min_n=ngram_min),
                 "suffix": SuffixProposer(memory_tokens=suffix_memory)}
    if draft_model is not None:
        draft_runner = as_runner(draft_model, prefix_cache)
        check_vocab_compatible(tokenizer, draft_tokenizer or tokenizer, runner.vocab_size, draft_runner.vocab_size)
        proposers["draft"] = DraftModelProposer(draft_runner, runner.vocab_size, context_window=draft_context)
        proposers["hybrid"] = HybridProposer(proposers["ngram"], proposers["draft"])
        proposers["hybrid-suffix"] = HybridProposer(proposers["suffix"], proposers["draft"], name="hybrid-suffix")
    elif proposer in WITH_DRAFT:
        raise ModelError(f"the {proposer} proposer needs a draft model")
    return SpeculativeGenerator(runner, tokenizer, proposers, default_proposer=proposer,
                                eos_token_ids=eos_ids(torch_model(target_model) or target_model, tokenizer),
                                config=config)


def eos_ids(model, tokenizer) -> list[int]:
    ids: set[int] = set()
    gen_cfg = getattr(model, "generation_config", None)
    for source in (getattr(gen_cfg, "eos_token_id", None), getattr(getattr(model, "config", None), "eos_token_id", None),
                   getattr(tokenizer, "eos_token_id", None)):
        if source is None:
            continue
        ids.update([source] if isinstance(source, int) else source)
    return sorted(ids)


def _load_llamacpp(spec: str, role: str, max_rows: int):
    """llamacpp:MODEL[@QUANT][+vN]: the GGUF as it is (or requantised once by llama.cpp, or with its
    vocabulary cut to a shortlist of N tokens: shortlist.py), with the tokenizer of its converted
    checkpoint."""
    from transformers import AutoTokenizer

    from .backends.llamacpp import LlamaCppRunner, requantized, split_quant

    name, vocab = _split_shortlist(spec, role)
    name, quant = split_quant(name)
    resolved = resolve(name, role)
    if resolved.gguf is None:
        raise ModelError(f"the llama.cpp backend loads GGUF files, and the {role} '{spec}' is not one: "
                         "give a .gguf file or a bundled model name")
    gguf = requantized(resolved.gguf, quant) if quant else resolved.gguf
    tokenizer = AutoTokenizer.from_pretrained(str(resolved.path))
    # One more row than the batch: calibration times a scratch row beside nothing else, and a
    # rejoining draft row is re-added before it is removed.
    if vocab is None:
        return LlamaCppRunner.load(gguf, max_rows=max_rows + 1), tokenizer
    full = LlamaCppRunner.vocab_of(gguf)
    ids = shortlist.shortlist_for(tokenizer, full, vocab, byte_tokens=True)
    runner = LlamaCppRunner.load(shortlist.shortlisted_gguf(gguf, ids), max_rows=max_rows + 1,
                                 embeddings=shortlist.EmbeddingTable(gguf))
    return shortlist.Shortlisted(runner, ids, full), tokenizer


def _split_shortlist(spec: str, role: str) -> tuple[str, int | None]:
    """The spec without its backend prefix, and its shortlist size (drafts only)."""
    name, vocab = shortlist.split_vocab(split_backend(spec.strip())[1])
    if vocab is not None and role != "draft":
        raise ModelError(f"'{spec}': a vocabulary shortlist is for drafts; the target keeps its full vocabulary "
                         "(its p must cover every token for the rejection step to be exact)")
    return name, vocab


def _check_proposer(name: str) -> None:
    if name not in PROPOSERS:
        raise ModelError(f"unknown proposer '{name}': choose one of {', '.join(PROPOSERS)}")


def _load(spec: str, role: str, dtype: str, max_rows: int = 8):
    """(transformers model or runner, tokenizer)."""
    backend = backend_of(spec)
    if backend == "llamacpp":
        return _load_llamacpp(spec, role, max_rows)
    name, vocab = _split_shortlist(spec, role)
    resolved = resolve(name if vocab else spec, role)
    try:
        # Under torchrun the target is sharded; the (small) draft is replicated on every rank.
        model, tokenizer = load_model(str(resolved.path), dtype, tensor_parallel=role == "target" and world_size() > 1)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"could not load the {role} model from {resolved.path}: {exc}") from exc
    if backend in ("hf-static", "hf-compile"):
        from .backends.hf_static import StaticRunner

        if vocab is not None:
            raise ModelError(f"'{spec}': the vocabulary shortlist runs on the hf and llamacpp backends")
        return StaticRunner(model, compile=backend == "hf-compile"), tokenizer
    if vocab is not None:
        full = logit_width(model)
        ids = shortlist.shortlist_for(tokenizer, full, vocab)
        return shortlist.Shortlisted(BatchRunner(shortlist.slice_head(model, ids)), ids, full), tokenizer
    return model, tokenizer
