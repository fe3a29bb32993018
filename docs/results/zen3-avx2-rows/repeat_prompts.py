"""k=auto on answers that repeat the prompt (an edit, a correction): plain, and k=auto at ceilings
(ARMS: 0 = plain, auto = the default k_max, autoN = k_max N, or a fixed k), greedy, up to 128 tokens.
Usage (from the repository root, nothing else running):
  .venv/bin/python docs/results/zen3-avx2-rows/repeat_prompts.py hybrid-suffix 0,auto8,auto16,auto32
Prints one line per prompt and arm (passes by source: [passes, drafted, accepted]) and the totals.
"""
import collections
import sys

from specdecode.models.generator import SpeculativeGenerator
from specdecode.policy.knobs import AutoKKnobs
from specdecode.sampling.params import SamplingParams
from specdecode.engine import stats
passes = []
record = stats.GenerationStats.record_pass
def logged(self, drafted, accepted, draft_s, verify_s, chances=(), source=None, levels=None):
    passes.append((source, drafted, accepted))
    return record(self, drafted, accepted, draft_s, verify_s, chances, source, levels)
stats.GenerationStats.record_pass = logged
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
prompts = ["Add type hints to this Python function and return the whole function:\n\n" + code,
           "Correct any spelling mistakes in the following text and return it in full:\n\n" + text.replace("revenue", "revenu")]
gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft="llamacpp:default@q4_0+v16k", proposer=sys.argv[1])
gen.generate(prompts[0], SamplingParams(max_new_tokens=4), k="auto")
arms = sys.argv[2].split(",")
tot = collections.defaultdict(lambda: [0.0, 0, 0.0])
for p in prompts:
    for arm in arms:
        k = int(arm) if arm.isdigit() else "auto"
        passes.clear()
        with gen.configured(auto_k=AutoKKnobs(k_max=int(arm[4:]) if arm.startswith("auto") and arm[4:] else AutoKKnobs.k_max)):
            s = gen.generate(p, SamplingParams(max_new_tokens=128, temperature=0, ignore_eos=False), k=k).stats
        by = {}
        for src, d, a in passes:
            b = by.setdefault(src or "none", [0, 0, 0]); b[0] += 1; b[1] += d; b[2] += a
        t = tot[arm]; t[0] += s["total_s"]; t[1] += s["new_tokens"]; t[2] += s["prefill_s"]
        print(arm, s["new_tokens"], by, f"{s['new_tokens'] / (s['total_s'] - s['prefill_s']):.1f} decode tok/s", flush=True)
for arm, (sec, n, pre) in tot.items():
    print("total", arm, f"{n / sec:.1f} tok/s, decode {n / (sec - pre):.1f}")
