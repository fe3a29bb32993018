"""Decode tokens/s per config over all prompts, and paired bootstrap 95% intervals (over prompts)
for auto / each fixed k. usage: python summ2.py RUNS.jsonl"""
import collections, json, sys
import numpy as np
from scipy import stats

rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = collections.defaultdict(dict)
for r in rows:
    by[r["config"]][r["id"]] = r
ids = sorted(set.intersection(*(set(v) for v in by.values())))
tok = {c: np.array([by[c][i]["new"] - 1 for i in ids], float) for c in by}
sec = {c: np.array([by[c][i]["total"] - by[c][i]["ttft"] for i in ids], float) for c in by}
rate = {c: tok[c].sum() / sec[c].sum() for c in by}
src = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
for r in rows:
    if r["id"] in ids:
        for s, v in r["by_source"].items():
            for j in range(3):
                src[r["config"]][s][j] += v[j]
print(f"{len(ids)} prompts in every config")
for c in by:
    print(f"{c:18} decode {rate[c]:.2f} tok/s ({rate[c] / rate['plain']:.2f}x plain)  {dict(src[c])}")


def ratio(a, b):
    def stat(idx):
        idx = idx.astype(int)
        return (tok[a][idx].sum() / sec[a][idx].sum()) / (tok[b][idx].sum() / sec[b][idx].sum())
    res = stats.bootstrap((np.arange(len(ids)),), stat, n_resamples=4000, random_state=0, vectorized=False,
                          method="percentile")
    return stat(np.arange(len(ids))), res.confidence_interval


for auto in [c for c in by if "auto" in c]:
    family = auto.split("-")[0]
    for other in [c for c in by if c.startswith(family) and c != auto]:
        r, ci = ratio(auto, other)
        print(f"{auto:18} / {other:18} {r:.3f}  95% CI [{ci.low:.3f}, {ci.high:.3f}]")
