"""Two servers, one run: paired speed of the same prompts, each metric as a ratio with a confidence
interval.

Per concurrency level the prompts are sent as whole rounds in the order A, B, B, A (ABBA: a drift of
the machine's speed over the level hits both servers alike), every request of a round in flight at
most `concurrency` at a time. Each prompt then has two measurements per server, averaged. A ratio
is the mean over prompts of one side's metric over the mean of the other's; its interval comes from
resampling the prompts (bootstrap, 2,000 resamples, percentiles), since prompts, not requests, are
what differ between a user's traffic and ours.

Ratios are "A relative to B", each oriented so that above 1 means A is better: tokens/s of a request
A/B, time per output token B/A, time to first token B/A, the level's aggregate tokens/s A/B.
"""

from __future__ import annotations

import asyncio

import numpy as np

from . import metrics
from .endpoint import RequestResult, run_level

ORDER = "ABBA"
RESAMPLES = 2000


def per_request(r: RequestResult) -> dict | None:
    if not r.ok or not r.steps or r.total_s <= 0:
        return None
    ttft = metrics.ttft(r.steps)
    if ttft is None:
        return None
    return {"tokens_per_s": r.completion_tokens / r.total_s, "ttft_s": ttft,
            "tpot_s": metrics.tpot(r.total_s, ttft, r.completion_tokens), "tokens": r.completion_tokens}


def ratio_ci(a: np.ndarray, b: np.ndarray, better_higher: bool, seed: int = 0, level: float = 0.95) -> dict:
    """mean(a)/mean(b) (or b/a for latencies) over prompts, with a bootstrap interval over prompts."""
    def ratio(x, y):
        return x.mean() / y.mean() if better_higher else y.mean() / x.mean()

    rng = np.random.default_rng(seed)
    n = len(a)
    draws = rng.integers(0, n, size=(RESAMPLES, n))
    boot = np.array([ratio(a[i], b[i]) for i in draws])
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"ratio": float(ratio(a, b)), "ci_low": float(lo), "ci_high": float(hi)}


def paired_level(sides: dict[str, tuple[str, str]], prompts: list[str], concurrency: int, max_tokens: int,
                 temperature: float, chat: bool, extra_body: dict | None, seed: int = 0,
                 system: str | None = None) -> dict:
    """sides: {"A": (base, model), "B": (base, model)}. One level, ABBA rounds."""
    per_prompt: dict[str, list[list[dict]]] = {s: [[] for _ in prompts] for s in sides}
    walls: dict[str, list[float]] = {s: [] for s in sides}
    tokens: dict[str, list[int]] = {s: [] for s in sides}
    errors: dict[str, list[str]] = {s: [] for s in sides}
    for side in ORDER:
        base, model = sides[side]
        results, wall = asyncio.run(run_level(base, model, prompts, concurrency, len(prompts), None, max_tokens,
                                              temperature, None, chat, 600.0, seed, extra_body, system))
        walls[side].append(wall)
        tokens[side].append(sum(r.completion_tokens for r in results if r.ok))
        for i, r in enumerate(results):
            m = per_request(r)
            if m is None:
                errors[side].append(r.error or "no tokens")
            else:
                per_prompt[side][i].append(m)
    both = [i for i in range(len(prompts)) if per_prompt["A"][i] and per_prompt["B"][i]]
    if len(both) < 2:
        raise ValueError(f"at concurrency {concurrency} fewer than 2 prompts got answers from both servers "
                         f"(errors: {(errors['A'] + errors['B'])[:2]})")

    def mean_of(side: str, key: str) -> np.ndarray:
        values = []
        for i in both:
            xs = [m[key] for m in per_prompt[side][i] if m[key] is not None]
            values.append(np.mean(xs) if xs else np.nan)
        return np.array(values, dtype=float)

    ratios = {}
    for key, higher in (("tokens_per_s", True), ("tpot_s", False), ("ttft_s", False)):
        a, b = mean_of("A", key), mean_of("B", key)
        keep = ~(np.isnan(a) | np.isnan(b))
        if keep.sum() >= 2:
            ratios[key] = ratio_ci(a[keep], b[keep], higher, seed)
    throughput = {s: sum(tokens[s]) / sum(walls[s]) for s in sides}
    return {"concurrency": concurrency, "temperature": temperature, "prompts": len(both), "order": ORDER,
            "ratios": ratios, "throughput_ratio": throughput["A"] / throughput["B"],
            "tokens_per_s": throughput,
            "medians": {s: {key: float(np.nanmedian(mean_of(s, key))) for key in ("tokens_per_s", "tpot_s", "ttft_s")}
                        for s in sides},
            "errors": {s: len(e) for s, e in errors.items()}}
