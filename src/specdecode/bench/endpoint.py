"""Load benchmark of any OpenAI-compatible server (ours, vLLM, SGLang, llama.cpp's server).

Requests stream (SSE). A chunk may carry several tokens (speculative servers emit whole accepted
blocks), so inter-token latency is computed per token: each chunk's gap is shared by the tokens in
it, counted by tokenizing the chunk's text and scaled so the request's total matches the server's
`usage.completion_tokens` when it reports one. Speculative counters (vLLM's names) are read from
/metrics before and after each concurrency level.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field

import httpx

from . import metrics

SPEC_COUNTERS = ("spec_decode_num_drafts", "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")


@dataclass
class RequestResult:
    ok: bool
    error: str | None = None
    start: float = 0.0
    total_s: float = 0.0
    steps: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, tokens)
    completion_tokens: int = 0
    prompt_tokens: int | None = None


def count_tokens(tokenizer, text: str) -> int:
    if not text:
        return 0
    if tokenizer is None:
        return max(1, len(text) // 4)  # rough; replaced by usage totals below when the server gives them
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


async def one_request(client: httpx.AsyncClient, url: str, body: dict, tokenizer, chat: bool) -> RequestResult:
    result = RequestResult(ok=False, start=time.perf_counter())
    finish = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:300]
                result.error = f"HTTP {response.status_code}: {text}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):  # a failure reported inside the stream (status was already 200)
                    err = event["error"]
                    result.error = "stream error: " + (err.get("message", str(err)) if isinstance(err, dict) else str(err))
                    result.total_s = time.perf_counter() - result.start
                    return result
                usage = event.get("usage")
                if usage:
                    result.completion_tokens = int(usage.get("completion_tokens") or 0)
                    result.prompt_tokens = usage.get("prompt_tokens")
                for choice in event.get("choices") or []:
                    finish = choice.get("finish_reason") or finish
                    text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                    n = count_tokens(tokenizer, text or "")
                    if n:
                        result.steps.append((time.perf_counter() - result.start, n))
        result.total_s = time.perf_counter() - result.start
        if finish not in ("stop", "length"):
            # A stream that ends without saying why (or aborted) is not a completed request.
            result.error = f"the stream ended with finish_reason {finish!r}"
            return result
        counted = sum(n for _, n in result.steps)
        if result.completion_tokens and counted and counted != result.completion_tokens:
            # Tokenizing chunks separately miscounts at chunk borders; the server's total is exact.
            scale = result.completion_tokens / counted
            result.steps = [(t, max(1, round(n * scale))) for t, n in result.steps]
        result.completion_tokens = result.completion_tokens or counted
        result.ok = True
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.total_s = time.perf_counter() - result.start
    return result


def chat_messages(prompt: str, system: str | None) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


async def run_level(base: str, model: str, prompts: list[str], concurrency: int, requests: int, rate: float | None,
                    max_tokens: int, temperature: float, tokenizer, chat: bool, timeout: float,
                    seed: int, extra_body: dict | None = None,
                    system: str | None = None) -> tuple[list[RequestResult], float]:
    url = f"{base}/v1/chat/completions" if chat else f"{base}/v1/completions"
    rng = random.Random(seed)
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        async def fire(i: int) -> RequestResult:
            prompt = prompts[i % len(prompts)]
            body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
                    "stream_options": {"include_usage": True}}
            body |= {"messages": chat_messages(prompt, system)} if chat else {"prompt": prompt}
            body |= extra_body or {}
            async with sem:
                return await one_request(client, url, body, tokenizer, chat)

        start = time.perf_counter()
        tasks = []
        for i in range(requests):
            tasks.append(asyncio.create_task(fire(i)))
            if rate:  # Poisson arrivals
                await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
        return list(results), time.perf_counter() - start


def scrape_counters(base: str) -> dict[str, float]:
    """Sum every sample of each speculative counter (any prefix, e.g. vllm:, specdecode_)."""
    try:
        text = httpx.get(f"{base}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)$", line.strip())
        if not m:
            continue
        name = m.group(1)
        for counter in SPEC_COUNTERS:
            if name.endswith(counter):
                totals[counter] = totals.get(counter, 0.0) + float(m.group(3))
    return totals


def summarise_level(results: list[RequestResult], wall_s: float, concurrency: int, before: dict, after: dict,
                    temperature: float, category: str = "all") -> dict:
    ok = [r for r in results if r.ok]
    itls = [x for r in ok for x in metrics.itl_per_token(r.steps)]
    ttfts = [metrics.ttft(r.steps) for r in ok if r.steps]
    tpots = [metrics.tpot(r.total_s, metrics.ttft(r.steps), r.completion_tokens) for r in ok if r.steps]
    tpots = [t for t in tpots if t is not None]
    tokens = sum(r.completion_tokens for r in ok)
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in SPEC_COUNTERS if key in after}
    drafted = delta.get("spec_decode_num_draft_tokens")
    accepted = delta.get("spec_decode_num_accepted_tokens")
    return {
        "method": "endpoint",
        "k": None,
        "temperature": temperature,
        "category": category,
        "concurrency": concurrency,
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_examples": sorted({r.error for r in results if r.error})[:3],
        "wall_s": wall_s,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "speedup_vs_plain": None,
        **metrics.latency_summary(ttfts, itls, tpots),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_accepted_tokens": (1 + accepted / delta["spec_decode_num_drafts"])
        if accepted is not None and delta.get("spec_decode_num_drafts") else None,
        "per_position_acceptance": [],
        "peak_rss_bytes": None,
        "spec_counters_delta": delta,
        "output_tokens_mean": tokens / len(ok) if ok else 0.0,
        **quarters(results),
    }


def quarters(results: list[RequestResult]) -> dict:
    """Median tokens/s of a request among the first and the last quarter of requests in the order
    they were sent (at least 8 requests): whether the server speeds up as it serves (a suffix
    memory filling with earlier answers)."""
    if len(results) < 8:
        return {"first_quarter_tokens_per_s": None, "last_quarter_tokens_per_s": None}
    n = len(results) // 4

    def median_rate(rs):
        rates = sorted(r.completion_tokens / r.total_s for r in rs if r.ok and r.total_s > 0)
        return rates[len(rates) // 2] if rates else None

    return {"first_quarter_tokens_per_s": median_rate(results[:n]), "last_quarter_tokens_per_s": median_rate(results[-n:])}


def run_endpoint_bench(base: str, prompts: list[str], levels: list[int], requests: int, rate: float | None,
                       max_tokens: int, temperature: float, tokenizer, chat: bool, model: str | None,
                       timeout: float = 600.0, seed: int = 0, progress=None,
                       extra_body: dict | None = None, system: str | None = None) -> tuple[list[dict], list[dict]]:
    base = base.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if model is None:
        try:
            listed = httpx.get(f"{base}/v1/models", timeout=30).json()
            model = listed["data"][0]["id"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"could not list models at {base}/v1/models ({exc}); pass --model") from None
    records, raw = [], []
    for level in levels:
        before = scrape_counters(base)
        results, wall = asyncio.run(run_level(base, model, prompts, level, requests, rate, max_tokens, temperature,
                                              tokenizer, chat, timeout, seed, extra_body, system))
        after = scrape_counters(base)
        records.append(summarise_level(results, wall, level, before, after, temperature))
        raw.extend({"concurrency": level, "ok": r.ok, "error": r.error, "total_s": r.total_s, "steps": r.steps,
                    "completion_tokens": r.completion_tokens} for r in results)
        if progress:
            progress(level)
    return records, raw
