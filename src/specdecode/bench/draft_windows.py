"""Draft context windows side by side: `bench --draft-context 0,128` runs each draft-using method
once per window, on one set of loaded models, so the windows are compared in one interleaved run.

A window bounds what the draft model must prefill before it can draft (its catch-up), which is what
decides whether a draft pays on short answers to long prompts; what it costs in acceptance depends
on the text, so it is measured rather than assumed."""

from __future__ import annotations

from collections.abc import Callable

from ..proposers import WITH_DRAFT
from .methods import ENGINE_METHODS, EngineMethod


def window_label(method: str, window: int | None) -> str:
    return f"{method}-ctx{window or 'all'}"


def window_variants(method_names: list[str], window: int | None, generator: Callable) -> list[EngineMethod]:
    """A method `<name>-ctx<window>` for each draft-using method asked for, all on one generator
    whose draft sees the last `window` prompt tokens (None: all); `generator(window)` builds it over
    the models already loaded, its costs seeded as the main generator's were."""
    names = [m for m in method_names if m in ENGINE_METHODS and ENGINE_METHODS[m] in WITH_DRAFT]
    if not names:
        return []
    gen = generator(window)
    return [EngineMethod(name, gen, label=window_label(name, window)) for name in names]
