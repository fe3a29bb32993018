"""Where a speculative pass's time goes: the engine's step split into its pieces by clocks wrapped
around them (no sampling profiler, whose overhead would inflate the Python parts), for the torch
target with a llama.cpp draft at a fixed k, greedy, on two prompts.

    python scripts/pass_profile.py OUT.json [DRAFT_SPEC] [K]

Per pass, in ms: plan (k=auto's choice; nothing at fixed k), draft (the proposer: per draft token a
llama_decode, the logits copy and widening, the softmax and the draw of q, the Python around them),
target forward (the verify pass), rejection (the rule over the k + 1 positions), rollback, and the
rest of the step (learning costs, committing tokens, stop checks).
"""

import json
import statistics
import sys
import time
from collections import defaultdict

from draft_cost import timed_decode  # beside this script

from specdecode import SamplingParams, SpeculativeGenerator

PROMPTS = ["Write a Python function that parses an ISO 8601 date string without using datetime, with tests.",
           "Summarise the causes of the French Revolution in one paragraph."]


def clock(obj, name: str, spent: dict, key: str) -> None:
    inner = getattr(obj, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start

    setattr(obj, name, timed)


def main(out: str, draft: str = "llamacpp:default@q4_0+v32k", k: int = 4) -> None:
    gen = SpeculativeGenerator.from_pretrained(target="default", draft=draft, proposer="draft", dtype="bfloat16")
    gen.generate("Hi", SamplingParams(max_new_tokens=8), k=k)
    spent: dict = defaultdict(float)
    drafting = [False]
    runner = gen.proposers["draft"].runner
    # Only a drafting step's decode counts: a row's prefill (its first sight of the prompt) is not one.
    in_decode = timed_decode(runner, counting=lambda: drafting[0]) if hasattr(getattr(runner, "inner", runner),
                                                                              "_lib") else None
    clock(runner, "forward", spent, "draft: runner forward")
    forward = runner.forward

    def flagged(*args, **kwargs):
        drafting[0] = True
        try:
            return forward(*args, **kwargs)
        finally:
            drafting[0] = False

    runner.forward = flagged
    for name in ("_plan", "_propose", "_score", "_verify", "_drop_rejected", "_learn", "_commit", "_leave", "_decode"):
        clock(gen, name, spent, name)
    passes, per_prompt = 0, []
    for prompt in PROMPTS:
        stats = gen.generate(prompt, SamplingParams(max_new_tokens=64, ignore_eos=True), k=k).stats
        passes += stats["target_passes"] - 1  # the prefill pass is not a decode step
        per_prompt.append({key: stats[key] for key in ("decode_tokens_per_s", "mean_accepted_tokens", "target_passes")})
    if in_decode is not None:
        spent["draft: llama_decode"] = in_decode()
    ms = {key: round(1000 * s / passes, 2) for key, s in spent.items()}
    named = ("_plan", "_propose", "_score", "_verify", "_drop_rejected")
    ms["rest of the step"] = round(ms["_decode"] - sum(ms.get(n, 0.0) for n in named), 2)
    from specdecode.models.backends.dtype_choice import cpu_description

    result = {"machine": cpu_description(), "draft": draft, "k": k, "passes": passes, "ms_per_pass": ms,
              "prompts": per_prompt}
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    for key, value in ms.items():
        print(f"{key}: {value} ms a pass")
    print(per_prompt, statistics.mean(p["decode_tokens_per_s"] for p in per_prompt))


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:3], *(int(a) for a in sys.argv[3:4]))
