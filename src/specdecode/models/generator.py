"""Build a SpeculativeGenerator from model specs or already-loaded transformers models."""

from __future__ import annotations

from ..engine.engine import Engine, EngineConfig
from ..proposers import (DEFAULT_PROPOSER, PROPOSERS, WITH_DRAFT, DraftModelProposer, HybridProposer, NgramProposer,
                         NoProposer, SuffixProposer)
from . import draft_choice, target_choice
from .backends.hf import parse_dtype
from .device import on_gpu, resolve_device
from .loader import as_runner, eos_ids, load, load_draft, torch_model
from .registry import ModelError, check_vocab_compatible


class SpeculativeGenerator(Engine):
    """The engine (engine.Engine), with constructors that load the models."""

    @classmethod
    def from_pretrained(cls, target: str = "auto", draft: str | None = "auto", proposer: str = DEFAULT_PROPOSER,
                        dtype: str = "auto", device: str = "auto", **options) -> "SpeculativeGenerator":
        """Load models by spec ('auto': the default model on the runtime and quantisation measured fastest for
        speculative decoding here (models/target_choice.py, cached); 'default' (torch), a directory, a .gguf
        file, a cached Hugging Face id).
        The draft "auto" is the default draft on the runtime measured fastest beside this target on
        this machine (models/draft_choice.py; measured on first use, cached). `device`: cpu, cuda[:N]
        or auto (a GPU when there is one; models/device.py).

        `draft` is ignored unless the proposer needs a draft model. Every generator can also run
        "ngram", "suffix" and "none" per request. Options: draft_dtype, ngram_max, ngram_min,
        draft_context, suffix_memory (tokens of recent outputs the suffix proposer keeps),
        prefix_cache (tokens of recent prompts whose KV is kept), config (engine.EngineConfig).
        """
        return load_generator(target=target, draft=draft, proposer=proposer, dtype=dtype, device=device, **options)

    @classmethod
    def from_models(cls, target_model, tokenizer, proposer: str = "draft", draft_model=None, draft_tokenizer=None,
                    **options) -> "SpeculativeGenerator":
        """Wrap already-loaded transformers models or runners (e.g. built from a config in a test)."""
        return build_generator(target_model, tokenizer, proposer, draft_model, draft_tokenizer, **options)


def load_generator(
    target: str = "auto",
    draft: str | None = "auto",
    proposer: str = DEFAULT_PROPOSER,
    dtype: str = "auto",
    draft_dtype: str | None = None,
    config: EngineConfig | None = None,
    device: str = "auto",
    **options,
) -> SpeculativeGenerator:
    """draft_dtype defaults to dtype; int8 drafts are cheap and cost nothing in exactness. Options
    are build_generator's (ngram_max, ngram_min, draft_context, suffix_memory, prefix_cache)."""
    _check_proposer(proposer)
    config = config or EngineConfig()
    device = resolve_device(device)
    target_choice_ = None
    if target.strip() == target_choice.AUTO:
        target_choice_ = choose_target(dtype, device)
        target = target_choice_["choice"]
    target_model, tokenizer, draft_model, draft_tokenizer = load_models(
        target, draft if proposer in WITH_DRAFT else None, dtype, draft_dtype, max_rows=config.max_batch, device=device
    )
    gen = build_generator(target_model, tokenizer, proposer, draft_model, draft_tokenizer, config=config, **options)
    if target_choice_ is not None:
        gen.info["target_choice"] = {"choice": target, "why": target_choice_["why"],
                                     "fastest_plain": target_choice_["fastest_plain"]}
    draft_choice_ = draft_measurements(target, target_model, tokenizer, draft if draft_model is not None else None,
                                       dtype, draft_dtype, device)
    if draft_model is not None and draft.strip() == draft_choice.AUTO:  # measured and cached by load_models
        gen.info["draft_choice"] = {"choice": draft_choice_["choice"], "why": draft_choice_["why"]}
        draft = draft_choice_["choice"]
    seed_costs(gen.pass_costs, target_choice_, draft_choice_)
    seed_draft_prior(gen, draft_choice_)
    gen.info.update(target=target, draft=draft if draft_model is not None else None, dtype=parse_dtype(dtype), device=device,
                    draft_dtype=parse_dtype(draft_dtype or dtype) if draft_model is not None else None)
    return gen


def load_models(target: str, draft: str | None, dtype: str = "auto", draft_dtype: str | None = None,
                max_rows: int = 8, device: str = "cpu"):
    """(target model, tokenizer, draft model or None, draft tokenizer or None), vocabularies checked;
    llama.cpp models come as runners with room for max_rows rows (and a scratch row)."""
    device = resolve_device(device)
    dtype = parse_dtype(dtype)
    draft_dtype = parse_dtype(draft_dtype or dtype)
    if target.strip() == target_choice.AUTO:
        target = choose_target(dtype, device)["choice"]
    target_model, tokenizer = load(target, "target", dtype, max_rows, device)
    if not draft:
        return target_model, tokenizer, None, None
    if draft.strip() == draft_choice.AUTO:
        draft = choose_draft(target, target_model, tokenizer, dtype, draft_dtype, device)["choice"]
    return (target_model, tokenizer, *load_draft(draft, draft_dtype, target_model, tokenizer, max_rows, device))


def chosen(found: dict | None) -> dict:
    """The measured row of the candidate a choice (target_choice / draft_choice) picked; {} without one."""
    found = found or {}
    return found.get("table", {}).get(found.get("choice"), {})


def seed_costs(costs, target_found: dict | None, draft_found: dict | None) -> None:
    """Start k=auto's cost curves from what the choices measured on this machine for exactly these
    models (the verify curve, the draft's step), so the first passes of a generation are priced
    rather than guessed; real passes refine them as always."""
    verify_ms = (draft_found or {}).get("verify_ms")
    if verify_ms is None:
        verify_ms = chosen(target_found).get("verify_ms")
    for width, ms in (verify_ms or {}).items():
        costs.verify.observe(int(width), ms / 1000)
    draft_row = chosen(draft_found)
    if draft_row:
        draft_s = draft_row["draft_ms"] / 1000
        costs.draft.observe(1, draft_s)
        # Its price per drafted token at one row, so that k=auto prices the draft model from the
        # first pass. Unpriced, a source drafts at the controller's k to be measured, and a draft
        # model behind on the prompt whose catch-up that k does not repay would never be measured.
        costs.seed_draft("draft", draft_s)
        # A draft's catch-up (its prefill of a prompt it has not seen), until one is timed in a
        # generation: the draft's own prefill of the calibration text, as --draft auto timed it; from
        # a choice that did not time it, the target's prefill time a token scaled by what a draft
        # step costs against a target step. Either is booked at the length it was timed over, since
        # the price a token depends on how many are caught up. Unpriced, the first catch-up of a
        # process was taken as free, whatever the prompt.
        tokens = draft_row.get("prefill_tokens", target_choice.PREFILL_TOKENS)
        if draft_row.get("prefill_ms_per_token"):
            costs.observe_catch_up(tokens, tokens * draft_row["prefill_ms_per_token"] / 1000)
        elif (prefill_rate := chosen(target_found).get("prefill_tokens_per_s")) and costs.verify(1) > 0:
            costs.observe_catch_up(tokens, tokens * draft_s / costs.verify(1) / prefill_rate)


def seed_draft_prior(gen, draft_found: dict | None) -> None:
    """Start the draft model's acceptance from its agreement with the target that --draft auto
    measured on the calibration text (greedy requests from the greedy agreement, sampled ones from
    the T = 1 one), instead of the knob's prior. With the prior alone a good draft could look as if
    it never paid: k=auto then never drafted from it or caught it up, and never learnt better."""
    row = chosen(draft_found)
    if row:
        gen.source_priors[("draft", False)] = row["greedy"]
        gen.source_priors[("draft", True)] = row["sampled"]


def choose_target(dtype: str, device: str = "cpu") -> dict:
    """What `--target auto` runs here: target_choice's measured pick (cached). On a GPU the default
    model in transformers, the one runtime here built for it."""
    import sys

    if on_gpu(device):
        return {"choice": "default", "why": f"--device {device}: transformers, in CUDA graphs (the runtimes "
                "target_choice compares are CPU builds)", "fastest_plain": None, "table": {}}
    return target_choice.choose(parse_dtype(dtype), log=lambda line: print(line, file=sys.stderr))


def choose_draft(target: str, target_model, tokenizer, dtype: str, draft_dtype: str | None = None,
                 device: str = "cpu") -> dict:
    """What `--draft auto` runs beside this target here: draft_choice's measured pick (cached under the
    target's resolved spec, never under "auto"). On a GPU the default draft in transformers."""
    import sys

    if on_gpu(device):
        return {"choice": "default", "why": f"--device {device}: the default draft in transformers, in CUDA graphs"}
    if target.strip() == target_choice.AUTO:
        target = choose_target(dtype)["choice"]

    return draft_choice.choose(target, target_model, tokenizer, parse_dtype(dtype), parse_dtype(draft_dtype or dtype),
                               log=lambda line: print(line, file=sys.stderr))


def draft_measurements(target: str, target_model, tokenizer, draft: str | None, dtype: str,
                       draft_dtype: str | None = None, device: str = "cpu") -> dict | None:
    """What was measured here of the draft a generator runs, for seed_costs and seed_draft_prior:
    `--draft auto`'s choice (measured on first use), or for a named draft the cached measurement of
    the same draft beside the same target, where there is one (draft_choice.measured_beside); None
    without a draft or a measurement."""
    if not draft:
        return None
    if draft.strip() == draft_choice.AUTO:
        return choose_draft(target, target_model, tokenizer, dtype, draft_dtype, device)
    if on_gpu(device) or target.strip() == target_choice.AUTO:
        return None
    return draft_choice.measured_beside(target, target_model, parse_dtype(dtype), parse_dtype(draft_dtype or dtype), draft)


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


def _check_proposer(name: str) -> None:
    if name not in PROPOSERS:
        raise ModelError(f"unknown proposer '{name}': choose one of {', '.join(PROPOSERS)}")
