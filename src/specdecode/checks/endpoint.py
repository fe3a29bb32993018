"""Is a running server's speculation exact? Two OpenAI-compatible endpoints, one test.

The same prompt is sampled N times from the server under test and N times from a baseline that
decodes plainly (another server, or the same one with speculation switched off per request where
it has such a switch), interleaved and with bounded concurrency. Each sample is the first m tokens
(the logprobs' tokens where the server returns them, else the completion's text, which is a
function of those tokens), and two tests judge the two samples:

- a chi-square test of homogeneity on the joint outcomes (cells merged to expected counts >= 5),
  false alarm at most alpha;
- a total-variation test with a guaranteed power: with probability >= 1 - alpha each empirical
  distribution is within `bound` of its truth (checks/goodness.tv_bound), so the run fails when the
  empirical TV exceeds 2 x bound, never falsely, and any true difference of TV >= 4 x bound is
  caught with probability >= 1 - alpha: that is what "N detects" in the report.

Where the baseline returns top logprobs covering >= 99% of the first token's mass and the sampling
transform is the identity (T = 1, no top-k/p, no penalties: logprobs are the model's own
distribution), the first tokens of the server under test are also tested against that exact
distribution (one-sample chi-square).

Requests are unseeded by default: a server that honours seeds with a drafter-invariant sampler
would otherwise give both sides the same draws. With --seed the two sides get disjoint seeds, and a
server that ignores seeds is told so before any sampling.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass, field

import httpx

from ..models.registry import ModelError
from .goodness import one_sample, tv_bound, two_sample

COVERAGE = 0.99  # top logprobs must cover this much of the first token's mass for the exact test
OTHER = ("<other>",)  # the first-token cell of every token outside the reported top logprobs


class EndpointError(ModelError):
    """An endpoint that cannot be checked as asked: one line that says what to do."""


@dataclass
class Side:
    """One endpoint as sampled: where, which model, what each request adds (e.g. speculation off)."""

    base: str
    model: str
    extra: dict = field(default_factory=dict)
    label: str = ""

    @property
    def url(self) -> str:
        return f"{self.base}/v1/completions"


def base_url(url: str) -> str:
    """The server's root from what a user may paste (…/v1, …/v1/completions)."""
    if not url.startswith(("http://", "https://")):
        raise EndpointError(f"an endpoint is an http(s) URL, got {url!r}")
    url = url.rstrip("/")
    for tail in ("/v1/completions", "/v1/chat/completions", "/v1"):
        if url.endswith(tail):
            return url[: -len(tail)]
    return url


def served_models(base: str, timeout: float = 10.0) -> list[dict]:
    """/v1/models' entries, or a one-line error for a server that cannot be reached or is not one."""
    try:
        response = httpx.get(f"{base}/v1/models", timeout=timeout)
    except httpx.HTTPError as exc:
        raise EndpointError(f"cannot reach {base} ({type(exc).__name__}): is the server running, and is the URL "
                            "its root (e.g. http://localhost:8000)?") from None
    if response.status_code != 200:
        raise EndpointError(f"{base}/v1/models answered HTTP {response.status_code}: not an OpenAI-compatible server")
    try:
        return list(response.json()["data"])
    except (ValueError, KeyError, TypeError):
        raise EndpointError(f"{base}/v1/models did not return an OpenAI model list") from None


def pick_model(base: str, entries: list[dict], asked: str | None) -> str:
    ids = [str(e.get("id")) for e in entries]
    if asked:
        if asked not in ids:
            raise EndpointError(f"{base} does not serve {asked!r} (it serves {', '.join(ids) or 'nothing'})")
        return asked
    if not ids:
        raise EndpointError(f"{base} serves no model")
    return ids[0]


def sides(endpoint: str, baseline: str | None, model: str | None = None,
          baseline_model: str | None = None) -> tuple[Side, Side]:
    """The server under test and its plain baseline; models checked to be the same."""
    base = base_url(endpoint)
    entries = served_models(base)
    tested = Side(base, pick_model(base, entries, model), label="endpoint")
    if baseline is None:
        if not any(e.get("owned_by") == "specdecode" for e in entries):
            raise EndpointError(f"{base} has no per-request switch for speculation that specdecode knows: give "
                                "--baseline URL, a server of the same model with speculation off")
        # Ours: the same server with no drafts per request.
        return tested, Side(base, tested.model, {"speculative": {"k": 0}}, label="baseline (same server, k=0)")
    other = base_url(baseline)
    plain = Side(other, pick_model(other, served_models(other), baseline_model or model), label="baseline")
    if plain.model != tested.model and baseline_model is None:
        raise EndpointError(f"the endpoints serve different models ({tested.model!r} at {base}, {plain.model!r} at "
                            f"{other}): if they are the same weights under two names, say so with --model and "
                            "--baseline-model")
    return tested, plain


def logprob_entries(logprobs) -> list[tuple[object, dict[object, float]]]:
    """(token, {alternative: logprob}) per position from either logprobs shape servers return:
    OpenAI's completions one ({"tokens": [...], "top_logprobs": [{text: lp}]}, ours and vLLM's) or the
    chat one ({"content": [{"id", "token", "logprob", "top_logprobs": [...]}]}, llama-server's). Token
    ids where the server gives them, else the token text."""
    if not isinstance(logprobs, dict):
        return []
    if logprobs.get("content"):
        key = lambda e: e.get("id", e.get("token"))  # noqa: E731
        return [(key(e), {key(t): float(t["logprob"]) for t in e.get("top_logprobs") or []})
                for e in logprobs["content"]]
    tokens = logprobs.get("tokens") or []
    tops = logprobs.get("top_logprobs") or [{} for _ in tokens]
    return [(t, dict(top or {})) for t, top in zip(tokens, tops)]


def outcome(choice: dict, length: int) -> tuple:
    """The first `length` tokens of a completion choice: its logprobs' tokens, else its text."""
    entries = logprob_entries(choice.get("logprobs"))
    if entries:
        return tuple(token for token, _ in entries[:length])
    return (choice.get("text", ""),)


async def _sample(client: httpx.AsyncClient, side: Side, body: dict, seeds: list[int | None],
                  sem: asyncio.Semaphore, length: int) -> list[tuple]:
    async def one(seed: int | None) -> tuple:
        request = {**body, "model": side.model, **side.extra}
        if seed is not None:
            request["seed"] = seed
        async with sem:
            try:
                response = await client.post(side.url, json=request)
            except httpx.HTTPError as exc:
                raise EndpointError(f"{side.base}: a request failed ({type(exc).__name__}: {exc})") from None
        if response.status_code != 200:
            raise EndpointError(f"{side.base} refused a sampling request (HTTP {response.status_code}: "
                                f"{response.text[:200]}): drop the fields it does not support")
        return outcome(response.json()["choices"][0], length)

    return await asyncio.gather(*(one(s) for s in seeds))


async def sample_both(tested: Side, plain: Side, body: dict, n: int, length: int, concurrency: int,
                      seed: int | None, timeout: float = 120.0) -> tuple[list[tuple], list[tuple]]:
    """n samples from each side, requests interleaved (A, B, A, B, ...) under one concurrency bound;
    with a seed, the sides' seeds are disjoint (seed .. seed+n-1 and seed+n .. seed+2n-1)."""
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=2 * concurrency + 2)) as client:
        chunk = max(1, concurrency)
        a: list[tuple] = []
        b: list[tuple] = []
        for start in range(0, n, chunk):
            idx = list(range(start, min(n, start + chunk)))
            seeds_a = [None if seed is None else seed + i for i in idx]
            seeds_b = [None if seed is None else seed + n + i for i in idx]
            got_a, got_b = await asyncio.gather(_sample(client, tested, body, seeds_a, sem, length),
                                                _sample(client, plain, body, seeds_b, sem, length))
            a += got_a
            b += got_b
    return a, b


def check_seeds(side: Side, body: dict, seed: int, length: int) -> None:
    """Two requests with one seed must agree, or the server ignores seeds."""
    async def twice():
        sem = asyncio.Semaphore(2)
        async with httpx.AsyncClient(timeout=120) as client:
            return await _sample(client, side, body, [seed, seed], sem, length)

    first, second = asyncio.run(twice())
    if first != second:
        raise EndpointError(f"{side.base} ignores `seed` (two requests with seed {seed} differed): run without "
                            "--seed (unseeded samples are just as valid)")


def first_token_exact(plain: Side, body: dict) -> tuple[dict | None, str]:
    """The exact distribution of the first token from the baseline's top logprobs, or why not."""
    if body.get("temperature", 1.0) != 1.0 or body.get("top_p", 1.0) < 1.0 or body.get("top_k", 0) > 0 or \
            body.get("presence_penalty") or body.get("frequency_penalty") or body.get("min_p") or \
            body.get("repetition_penalty", 1.0) != 1.0 or body.get("response_format"):
        return None, "the sampling transform is not the identity (logprobs report the model's own distribution)"
    request = {**body, "model": plain.model, **plain.extra, "max_tokens": 1, "logprobs": 20}
    try:
        response = httpx.post(plain.url, json=request, timeout=120)
    except httpx.HTTPError as exc:
        return None, f"the baseline's logprobs request failed ({type(exc).__name__})"
    if response.status_code != 200:
        return None, f"the baseline refused logprobs=20 (HTTP {response.status_code})"
    entries = logprob_entries(response.json()["choices"][0].get("logprobs"))
    if not entries or not entries[0][1]:
        return None, "the baseline returns no top_logprobs"
    probs = {(token,): math.exp(lp) for token, lp in entries[0][1].items()}
    covered = sum(probs.values())
    if covered < COVERAGE:
        return None, f"the baseline's top {len(probs)} logprobs cover {covered:.1%} of the first token's mass " \
                     f"(< {COVERAGE:.0%})"
    probs[OTHER] = max(0.0, 1.0 - covered)
    return probs, f"top {len(probs) - 1} logprobs cover {covered:.2%}"


def judge(tested: list[tuple], plain: list[tuple], exact: dict | None, alpha: float) -> dict:
    """Both tests on the joint outcomes, and the one-sample test of the first token where exact."""
    joint = two_sample(Counter(tested), Counter(plain), alpha=alpha)
    # TV test: each side's empirical distribution within `bound` of its own truth (prob >= 1 - alpha/2 each).
    bound = tv_bound(len(tested), joint.cells, alpha / 2)
    report = {"samples": len(tested), "cells": joint.cells, "distinct_outcomes": len(set(tested) | set(plain)),
              "chi2": joint.chi2, "p_value": joint.p_value, "tv_distance": joint.tv_distance,
              "tv_fail_above": 2 * bound, "detects_tv": min(1.0, 4 * bound), "alpha": alpha}
    report["joint_passed"] = joint.p_value >= alpha and joint.tv_distance <= 2 * bound
    report["passed"] = report["joint_passed"]
    if exact is not None:
        known = {key for key in exact if key != OTHER}
        firsts = Counter(s[:1] if s[:1] in known else OTHER for s in tested)
        first = one_sample(firsts, exact, alpha=alpha)
        report["first_token_exact"] = first.as_dict()
        report["passed"] = report["passed"] and first.passed
    return report


def samples_for(tv: float, cells: int, alpha: float) -> int:
    """Samples per side whose TV test detects a difference of `tv` (4 x bound <= tv) over `cells` cells."""
    n = 10
    while 4 * tv_bound(n, cells, alpha / 2) > tv:
        n = int(n * 1.25) + 1
    return n
