"""Latency and speculation metrics, from per-step records of one request.

A step is one target pass (or one streamed chunk for a peer) that emitted n tokens together.
Inter-token latency is per token: a step's duration is shared evenly by the tokens it emitted, so a
step of 4 tokens taking 200 ms contributes four ITLs of 50 ms (not one of 200 ms, as a per-chunk
count would). TTFT is the end of the first step that emitted a token; the other tokens of that
step each get TTFT / n.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def itl_per_token(steps: Sequence[tuple[float, int]]) -> list[float]:
    """steps: (end time since the request began, tokens emitted). Returns one ITL per token after
    the first."""
    itls: list[float] = []
    previous = 0.0
    first = True
    for end, n in steps:
        if n <= 0:
            continue
        share = (end - previous) / n
        itls.extend([share] * (n - 1 if first else n))
        first = False
        previous = end
    return itls


def ttft(steps: Sequence[tuple[float, int]]) -> float | None:
    return next((end for end, n in steps if n > 0), None)


def tpot(total_s: float, ttft_s: float, tokens: int) -> float | None:
    """Time per output token after the first (vLLM's definition)."""
    return (total_s - ttft_s) / (tokens - 1) if tokens > 1 else None


def percentiles(values: Iterable[float], qs: Sequence[float] = (50, 90, 99)) -> list[float | None]:
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return [None] * len(qs)
    return [float(x) for x in np.percentile(data, qs)]


def latency_summary(ttfts: Sequence[float], itls: Sequence[float], tpots: Sequence[float]) -> dict:
    """The latency fields of a results record: median TTFT and TPOT over requests, ITL percentiles
    over all tokens."""
    p50, p90, p99 = percentiles(itls)
    return {
        "ttft_s": float(np.median(ttfts)) if len(ttfts) else None,
        "itl_p50_s": p50,
        "itl_p90_s": p90,
        "itl_p99_s": p99,
        "tpot_s": float(np.median(tpots)) if len(tpots) else None,
    }


def expected_tokens_per_pass(per_position: Sequence[float]) -> float:
    """Expected tokens per target pass when every pass drafts len(per_position) tokens.

    per_position[i] is the fraction of passes whose draft i was accepted, which (drafts being
    accepted in order) is the probability that drafts 0..i all were; the pass emits those plus one.
    """
    return 1.0 + float(sum(per_position))


def per_position(accepted: Sequence[int], drafted: Sequence[int]) -> list[float]:
    return [a / d if d else 0.0 for a, d in zip(accepted, drafted)]


def conditional_acceptance(per_position: Sequence[float]) -> list[float]:
    """Chance that draft i is accepted given drafts 0..i-1 were, from per_position (the fraction of
    passes whose draft i was accepted, every pass drafting them all): the c_i of costs.expected_tokens."""
    out, before = [], 1.0
    for p in per_position:
        out.append(min(1.0, p / before) if before > 0 else 0.0)
        before = p
    return out


def add_counts(total: list[int], more: Sequence[int]) -> list[int]:
    out = list(total) + [0] * max(0, len(more) - len(total))
    for i, v in enumerate(more):
        out[i] += v
    return out
