"""Session 10: redo a tune JSON's choices with the current cost model, from the
acceptance runs and costs it saved, optionally over a subset of its proposers.
usage: python redo.py TUNE.json OUT.json [draft,ngram]   (needs specdecode importable)"""
import json
import sys

from specdecode import tune as T

t = json.load(open(sys.argv[1]))
names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(t["acceptance_runs"])
k_values = sorted({r["k"] for r in t["table"] if r["k"]})
k_max = max(k_values)
costs = T.Costs({int(w): s for w, s in t["verify_cost_s"].items()}, t["draft_token_s"], t.get("lookup_s", 0.0))
runs = {n: t["acceptance_runs"][n] for n in names}


def choose(rows):
    accs = {n: T.acceptance_from(rows[n], n, k_max) for n in names}
    preds = T.candidates(costs, accs, k_values)
    return T.recommend(preds), preds, accs


best, preds, accs = choose(runs)
out = {"proposer": best.proposer, "k": best.k, "predicted_tokens_per_s": best.predicted_tokens_per_s,
       "measured_tokens_per_s": None, "table": [T.as_dict(p) for p in preds], "per_category": {},
       "scales": {"verify": T.verify_scale(costs, list(accs.values())), "draft": T.draft_scale(costs, list(accs.values()))}}
for cat in sorted({r["category"] for r in runs[names[0]]}):
    pick, cat_preds, _ = choose({n: [r for r in runs[n] if r["category"] == cat] for n in names})
    out["per_category"][cat] = {"proposer": pick.proposer, "k": pick.k, "predicted_tokens_per_s": pick.predicted_tokens_per_s,
                                "table": [T.as_dict(p) for p in cat_preds]}
json.dump(out, open(sys.argv[2], "w"))
print(out["proposer"], out["k"], out["scales"], {c: (v["proposer"], v["k"]) for c, v in out["per_category"].items()})
