"""Soak run: thousands of requests against the server (tiny random models, loopback), checking
that none fails and that memory stops growing.

    python tests/soak.py --requests 3000 --concurrency 8 [--json]

Requests mix proposers (draft, ngram, suffix, hybrid-suffix, none), k (fixed and auto),
temperatures, stop strings, streaming and not, and a share of clients that hang up mid-stream. The
suffix memory is bounded at SUFFIX_TOKENS tokens; its size is sampled with the RSS and must stay
under the bound. RSS is sampled after each
tenth of the run; growth is reported from the end of the first tenth (warm-up: allocator pools,
histogram buckets, code paths first taken) to the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).parent))

import tiny  # noqa: E402
from live_server import live_server  # noqa: E402

from specdecode import SpeculativeGenerator  # noqa: E402
from specdecode.engine.engine import EngineConfig  # noqa: E402
from specdecode.server import create_app  # noqa: E402


def body(i: int, rng: random.Random) -> dict:
    proposer, k = rng.choice([("draft", 3), ("draft", "auto"), ("ngram", 4), ("suffix", 6), ("suffix", "auto"),
                              ("hybrid-suffix", 3), ("none", 0)])
    b = {"prompt": "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(3, 60))),
         "max_tokens": rng.randint(1, 24), "temperature": rng.choice([0, 0.7, 1.0]), "seed": i,
         "speculative": {"proposer": proposer, "k": k}, "stream": rng.random() < 0.5}
    if rng.random() < 0.2:
        b["stop"] = [rng.choice("abcd")]
    return b


async def client(base: str, i: int, rng: random.Random, http: httpx.AsyncClient) -> str:
    b = body(i, rng)
    hang_up = b["stream"] and rng.random() < 0.1
    if not b["stream"]:
        r = await http.post(f"{base}/v1/completions", json=b)
        return "ok" if r.status_code == 200 and "usage" in r.json() else f"HTTP {r.status_code}: {r.text[:200]}"
    async with http.stream("POST", f"{base}/v1/completions", json=b) as r:
        if r.status_code != 200:
            return f"HTTP {r.status_code}"
        async for line in r.aiter_lines():
            if hang_up and line.startswith("data: "):
                return "hung up"
            if line == "data: [DONE]":
                return "ok"
    return "stream ended without [DONE]"


async def drive(base: str, requests: int, concurrency: int, seed: int, on_tenth) -> dict[str, int]:
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    sem = asyncio.Semaphore(concurrency)
    done = 0
    async with httpx.AsyncClient(timeout=120) as http:
        async def one(i):
            nonlocal done
            async with sem:
                try:
                    outcome = await client(base, i, rng, http)
                except httpx.HTTPError as exc:
                    outcome = f"{type(exc).__name__}"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            done += 1
            if done % max(1, requests // 10) == 0:
                on_tenth(done)

        await asyncio.gather(*(one(i) for i in range(requests)))
    return outcomes


SUFFIX_TOKENS = 2000  # small, so that the soak evicts many times over


def soak(requests: int = 3000, concurrency: int = 8, seed: int = 0) -> dict:
    tok = tiny.tokenizer()
    engine = SpeculativeGenerator.from_models(tiny.model(), tok, "draft", tiny.model(hidden=32, layers=1, seed=1), tok,
                                              config=EngineConfig(max_batch=8, max_waiting=4 * concurrency),
                                              suffix_memory=SUFFIX_TOKENS)
    suffix = engine.proposers["suffix"]
    engine.calibrate()
    proc = psutil.Process()
    rss = []
    start = time.perf_counter()
    with live_server(create_app(engine, "tiny")) as (base, _):
        memory = []

        def tenth(n):
            rss.append((n, proc.memory_info().rss))
            memory.append(suffix.memory_size)

        outcomes = asyncio.run(drive(base, requests, concurrency, seed, tenth))
        metrics = httpx.get(f"{base}/metrics").text
    wall = time.perf_counter() - start
    failed = {k: v for k, v in outcomes.items() if k not in ("ok", "hung up")}
    base_rss = rss[0][1] if rss else proc.memory_info().rss
    return {
        "requests": requests, "concurrency": concurrency, "wall_s": round(wall, 1),
        "outcomes": outcomes, "failed": sum(failed.values()), "failures": failed,
        "rss_mb": [(n, round(b / 2**20, 1)) for n, b in rss],
        "rss_growth_mb": round((max(b for _, b in rss) - base_rss) / 2**20, 1) if rss else 0.0,
        "suffix_memory_tokens": memory, "suffix_memory_bound": SUFFIX_TOKENS,
        "suffix_memory_within_bound": all(m <= SUFFIX_TOKENS for m in memory),
        "suffix_counters": dict(suffix.counters),
        "engine": dict(engine.counters), "rows_left": engine.running, "cache_columns_left": engine.target.columns,
        "aborted_in_metrics": sum(float(line.split()[-1]) for line in metrics.splitlines()
                                  if line.startswith('specdecode:request_success_total') and 'abort' in line),
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(soak(args.requests, args.concurrency, args.seed), indent=1))
