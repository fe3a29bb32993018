"""How a target and a draft on two runtimes share the cores (`specdecode profile threads`): the same
greedy generation under each thread arrangement, each in a fresh process (OpenMP reads its
environment once), the arrangements taking turns round by round so that a shared machine's drift
falls on all alike.

The arrangements: the defaults (torch and llama.cpp each with a thread per core, OpenMP threads
spinning a while after a parallel region); OMP_WAIT_POLICY=PASSIVE (threads sleep at once instead
of spinning); llama.cpp on one thread; torch on one thread. Per arrangement: the median decode
tokens/s, and per pass the draft and verify milliseconds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from ..models.backends.dtype_choice import cpu_description

ARRANGEMENTS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "llamacpp-1-thread": {"SPECDECODE_LLAMACPP_THREADS": "1"},
    "torch-1-thread": {"OMP_NUM_THREADS": "1"},
}
PROMPTS = ["Write a Python function that checks whether a string is a palindrome, with a docstring and tests.",
           "Explain in three sentences why the sky is blue."]
# One arrangement's run: generate each prompt with the draft proposer at a fixed k, print the stats.
CHILD = """
import json, sys
from specdecode import SamplingParams, SpeculativeGenerator
target, draft, dtype, tokens, prompts = json.loads(sys.argv[1])
gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer="draft", dtype=dtype)
gen.generate("Hi", SamplingParams(max_new_tokens=4), k=4)
rows = []
for prompt in prompts:
    s = gen.generate(prompt, SamplingParams(max_new_tokens=tokens, ignore_eos=True), k=4).stats
    rows.append({key: s[key] for key in ("decode_tokens_per_s", "draft_s", "verify_s", "target_passes")})
print(json.dumps(rows))
"""


def run_once(env: dict, target: str, draft: str, dtype: str, tokens: int) -> list[dict]:
    args = json.dumps([target, draft, dtype, tokens, PROMPTS])
    done = subprocess.run([sys.executable, "-c", CHILD, args], env={**os.environ, **env}, capture_output=True,
                          text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the generation under {env or 'the default environment'} failed: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def thread_arrangements(target: str = "default", draft: str = "llamacpp:default@q4_0+v32k", dtype: str = "auto",
                        rounds: int = 3, tokens: int = 48, names: list[str] | None = None) -> dict:
    """{machine, target, draft, summary: {arrangement: {decode_tokens_per_s, draft_ms_per_pass,
    verify_ms_per_pass}}, runs}."""
    names = names or list(ARRANGEMENTS)
    unknown = [n for n in names if n not in ARRANGEMENTS]
    if unknown:
        raise ValueError(f"unknown thread arrangement {unknown[0]!r}: choose from {', '.join(ARRANGEMENTS)}")
    found: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            found[name] += run_once(ARRANGEMENTS[name], target, draft, dtype, tokens)
    summary = {name: {
        "decode_tokens_per_s": round(statistics.median(r["decode_tokens_per_s"] for r in rows), 3),
        "draft_ms_per_pass": round(statistics.median(1000 * r["draft_s"] / r["target_passes"] for r in rows), 1),
        "verify_ms_per_pass": round(statistics.median(1000 * r["verify_s"] / r["target_passes"] for r in rows), 1),
    } for name, rows in found.items()}
    return {"machine": cpu_description(), "target": target, "draft": draft, "rounds": rounds, "summary": summary,
            "runs": found}
