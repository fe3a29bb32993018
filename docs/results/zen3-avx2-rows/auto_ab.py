"""A/B of k=auto's rules, interleaved prompt by prompt in one process: the default against
- flat: the same counts read with a flat prior at every position (no `AcceptanceTracker.borrows`);
- meancatch: a draft model's catch-up weighed at its mean acceptance (`catch_up_optimism` = 0);
  catchN: at N standard deviations up;
- pertoken: drafting priced a token at a time (k times what a token cost), not by `DraftCost`;
beside fixed k.

Each arm keeps its own suffix memory and pooled acceptance, as `specdecode bench` keeps each method's;
the learnt costs are shared, so the arms take turns at going first.
Usage (from the repository root, nothing else running):
  .venv/bin/python docs/results/zen3-avx2-rows/auto_ab.py ARMS LIMIT TEMPERATURE WORKLOAD
  e.g. ... auto,flat,6,4 8 0 code      (ARMS: auto, autoN (k_max N), flat, meancatch, catchN, pertoken, or a fixed k;
  PROPOSER:ARM runs another proposer than hybrid-suffix, e.g. suffix:auto or ngram:6)
WORKLOAD "repeat": two prompts whose answer repeats the prompt (an edit, a correction), up to 128
tokens to the end of the answer instead of 64 past it.
Prints one line per prompt and arm (passes by source: [passes, drafted, accepted]) and the totals.
"""

import sys
from collections import OrderedDict

import numpy as np

from specdecode.bench.workloads import load_workload
from specdecode.engine import stats
from specdecode.models.generator import SpeculativeGenerator
from specdecode.policy import costs
from specdecode.policy.knobs import AutoKKnobs, LoadCapKnobs
from specdecode.proposers.suffix import memories_for
from specdecode.sampling.params import SamplingParams

FLAT = {"on": False}
borrowing = costs.AcceptanceTracker.conditional.fget


def conditional(self):
    if FLAT["on"]:
        return np.divide(self.accepted, self.judged, out=np.zeros_like(self.accepted), where=self.judged > 0)
    return borrowing(self)


costs.AcceptanceTracker.conditional = property(conditional)
PER_TOKEN = {"on": False}
by_k = costs.PassCosts.draft_price


def draft_price(self, source):
    return self.per_draft[source] if PER_TOKEN["on"] else by_k(self, source)


costs.PassCosts.draft_price = draft_price
passes = []
record = stats.GenerationStats.record_pass


def logged(self, drafted, accepted, draft_s, verify_s, chances=(), source=None, levels=None):
    passes.append((source, drafted, accepted))
    return record(self, drafted, accepted, draft_s, verify_s, chances, source, levels)


stats.GenerationStats.record_pass = logged

arms, limit, temperature, workload = sys.argv[1].split(","), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft="llamacpp:default@q4_0+v16k",
                                           proposer="hybrid-suffix")
code = '''def merge_intervals(intervals):
    if not intervals:
        return []
    intervals.sort(key=lambda x: x[0])
    merged = [intervals[0]]
    for start, end in intervals[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged
'''
text = ("The quarterly report shows that revenue grew by 12 percent compared with the same quarter last year, "
        "driven mainly by strong demand in the European market and a recovery in Asian sales. Operating costs rose "
        "by 4 percent, largely because of higher energy prices and new hires in the engineering team. ")
REPEAT = ["Add type hints to this Python function and return the whole function:\n\n" + code,
          "Correct any spelling mistakes in the following text and return it in full:\n\n" + text.replace("revenue", "revenu")]
if workload == "repeat":
    prompts = REPEAT[:limit]
    params = SamplingParams(max_new_tokens=128, temperature=temperature, seed=0)
else:
    prompts = [p.turns[0] for p in load_workload(workload, None, limit)]
    params = SamplingParams(max_new_tokens=64, temperature=temperature, seed=0, ignore_eos=True)
gen.generate(prompts[0], SamplingParams(max_new_tokens=4), k="auto")  # warm-up
memories = {arm: OrderedDict() for arm in arms}
pooled = {arm: {} for arm in arms}
totals = {arm: [0.0, 0, 0, 0.0] for arm in arms}  # seconds, tokens, passes, prefill seconds
for i, prompt in enumerate(prompts):
    for arm in arms[i % len(arms):] + arms[:i % len(arms)]:  # no arm always first after another's costs
        FLAT["on"] = arm.endswith("flat")
        PER_TOKEN["on"] = arm.endswith("pertoken")
        proposer, _, rule = arm.rpartition(":")
        k = int(rule) if rule.isdigit() else "auto"
        knobs = LoadCapKnobs(catch_up_optimism=0.0 if rule == "meancatch" else float(rule[5:]) if rule.startswith("catch")
                             else LoadCapKnobs.catch_up_optimism)
        reach = AutoKKnobs(k_max=int(rule[4:]) if rule.startswith("auto") and rule[4:].isdigit() else AutoKKnobs.k_max)
        passes.clear()
        saved, gen.pooled_acceptance = gen.pooled_acceptance, pooled[arm]
        with memories_for(gen.proposers, memories[arm]), gen.configured(load_cap=knobs, auto_k=reach):
            s = gen.generate(prompt, params, k=k, proposer=proposer or None).stats
        gen.pooled_acceptance = saved
        t = totals[arm]
        t[0] += s["total_s"]; t[1] += s["new_tokens"]; t[2] += s["target_passes"]; t[3] += s["prefill_s"]
        by = {}
        for source, drafted, accepted in passes:
            b = by.setdefault(source or "none", [0, 0, 0])
            b[0] += 1; b[1] += drafted; b[2] += accepted
        print(arm, i, by, f"{s['new_tokens'] / (s['total_s'] - s['prefill_s']):.1f} tok/s decode", flush=True)
for arm, (seconds, tokens, n, prefill) in totals.items():
    print("total", arm, f"{tokens / seconds:.1f} tok/s, decode {tokens / (seconds - prefill):.1f} tok/s, "
          f"{tokens / n:.2f} tokens a pass", flush=True)
