"""Draft context windows side by side: `bench --draft-context 0,128` runs each draft-using method
once per window, on one set of loaded models, so the windows are compared in one interleaved run.

A window bounds what the draft model must prefill before it can draft (its catch-up), which is what
decides whether a draft pays on short answers to long prompts; what it costs in acceptance depends
on the text, so it is measured rather than assumed."""

from __future__ import annotations

from collections.abc import Callable

from ..models.generator import build_generator
from ..proposers import WITH_DRAFT
from .methods import ENGINE_METHODS, EngineMethod


def window_label(method: str, window: int | None) -> str:
    return f"{method}-ctx{window or 'all'}"


def window_variants(method_names: list[str], window: int | None, target_model, tokenizer, draft_model, draft_tok,
                    prepare: Callable, suffix_memory: int) -> list[EngineMethod]:
    """One generator whose draft sees the last `window` prompt tokens (None: all), and a method
    `<name>-ctx<window>` on it for each draft-using method asked for; `prepare(gen)` seeds its
    costs as the main generator's were."""
    names = [m for m in method_names if m in ENGINE_METHODS and ENGINE_METHODS[m] in WITH_DRAFT]
    if not names or draft_model is None:
        return []
    gen = build_generator(target_model, tokenizer, "draft", draft_model, draft_tok, draft_context=window,
                          suffix_memory=suffix_memory)
    prepare(gen)
    return [EngineMethod(name, gen, label=window_label(name, window)) for name in names]
