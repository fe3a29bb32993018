"""How the two runtimes of a torch target with a llama.cpp draft share the cores: the same greedy
generation under each thread arrangement, each in a fresh process (OpenMP reads its environment once),
arrangements taking turns round by round so that a shared machine's drift falls on all alike.

    python scripts/thread_arrangement.py OUT.json [ROUNDS]

Arrangements: the defaults (torch and llama.cpp each with a thread per core, OpenMP spinning after a
parallel region); OMP_WAIT_POLICY=PASSIVE (threads sleep at once instead of spinning, for torch's
OpenMP and llama.cpp's, both libgomp here); llama.cpp on one thread; torch on one thread. Per
arrangement: median decode tokens/s, and per pass the draft and verify seconds.
"""

import json
import os
import statistics
import subprocess
import sys

ARRANGEMENTS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "llamacpp-1-thread": {"SPECDECODE_LLAMACPP_THREADS": "1"},
    "torch-1-thread": {"OMP_NUM_THREADS": "1"},
}
PROMPTS = ["Write a Python function that checks whether a string is a palindrome, with a docstring and tests.",
           "Explain in three sentences why the sky is blue."]
CHILD = """
import json, sys
from specdecode import SamplingParams, SpeculativeGenerator
gen = SpeculativeGenerator.from_pretrained(target="default", draft="llamacpp:default@q4_0+v32k", proposer="draft",
                                           dtype="bfloat16")
gen.generate("Hi", SamplingParams(max_new_tokens=4), k=4)
rows = []
for prompt in json.loads(sys.argv[1]):
    s = gen.generate(prompt, SamplingParams(max_new_tokens=48, ignore_eos=True), k=4).stats
    rows.append({key: s[key] for key in ("decode_tokens_per_s", "draft_s", "verify_s", "target_passes")})
print(json.dumps(rows))
"""


def run(env: dict) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(PROMPTS)], env={**os.environ, **env},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(out: str, rounds: int = 3) -> None:
    found: dict[str, list[dict]] = {name: [] for name in ARRANGEMENTS}
    for _ in range(rounds):
        for name, env in ARRANGEMENTS.items():
            found[name] += run(env)
    summary = {}
    for name, rows in found.items():
        summary[name] = {
            "decode_tokens_per_s": round(statistics.median(r["decode_tokens_per_s"] for r in rows), 3),
            "draft_ms_per_pass": round(statistics.median(1000 * r["draft_s"] / r["target_passes"] for r in rows), 1),
            "verify_ms_per_pass": round(statistics.median(1000 * r["verify_s"] / r["target_passes"] for r in rows), 1),
        }
    from specdecode.models.backends.dtype_choice import cpu_description

    with open(out, "w") as fh:
        json.dump({"machine": cpu_description(), "summary": summary, "runs": found}, fh, indent=1)
    for name, row in summary.items():
        print(name, row)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
