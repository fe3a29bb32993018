"""Two rows in flight on the hybrid engine (torch target, llama.cpp q4_0 draft, k=auto, the load
policy on): what the load policy predicted for each two-row step against what it cost, for the steps
it kept plain and the steps it let speculate.

    .venv/bin/python scripts/policy_costs.py OUT.json [REQUESTS]
"""
import json, sys, time, statistics
from specdecode import SamplingParams, EngineConfig
from specdecode.models.generator import SpeculativeGenerator
from specdecode.engine.request import Request
from specdecode.bench.workloads import load_workload

gen = SpeculativeGenerator.from_pretrained(target="default", draft="llamacpp:default@q4_0", proposer="hybrid",
                                           draft_context=128, config=EngineConfig(max_batch=8))
gen.calibrate()
prompts = [gen.encode(p.turns[0]) for p in load_workload("spec-bench", None, 12)]
pol = gen.policy
log = []
real_cap = pol.cap
def cap(rows):
    c = real_cap(rows)
    if len(rows) > 1:
        e = {x: pol.expected_tokens(rows, x) for x in range(0, max(r.wanted for r in rows) + 1)}
        t = {x: pol.step_cost(rows, x) for x in e}
        log.append({"rows": len(rows), "cap": c, "probing": pol.probing, "wanted": [r.wanted for r in rows],
                    "model": [r.uses_draft_model for r in rows], "behind": [r.behind for r in rows],
                    "expected": e, "predicted": t})
    return c
pol.cap = cap
params = SamplingParams(max_new_tokens=32, ignore_eos=True)
queue = list(range(int(sys.argv[2]) if len(sys.argv) > 2 else 24))
inflight = []
steps = []
t_start = time.perf_counter()
while queue or inflight:
    while len(inflight) < 2 and queue:
        i = queue.pop(0)
        r = Request(list(prompts[i % len(prompts)]), params, k="auto")
        gen.submit(r); inflight.append(r)
    n_log = len(log)
    before = sum(len(r.generated) for r in inflight)
    rows = gen.running
    t0 = time.perf_counter(); gen.step(); dt = time.perf_counter() - t0
    after = sum(len(r.generated) for r in inflight)
    entry = log[-1] if len(log) > n_log else None
    steps.append({"rows": rows, "dt": dt, "emitted": after - before, "cap": entry["cap"] if entry else None,
                  "pred": entry["predicted"] if entry else None, "exp": entry["expected"] if entry else None,
                  "probing": entry["probing"] if entry else None})
    inflight = [r for r in inflight if not r.done]
print("wall", time.perf_counter() - t_start)
two = [s for s in steps if s["rows"] == 2 and s["cap"] is not None]
for cap_on in (False, True):
    sel = [s for s in two if (s["cap"] > 0) == cap_on]
    if not sel: continue
    dt = sum(s["dt"] for s in sel); em = sum(s["emitted"] for s in sel)
    pred = sum(s["pred"][s["cap"]] for s in sel)
    exp = sum(s["exp"][s["cap"]] for s in sel)
    print(f"cap>0={cap_on}: steps {len(sel)}, actual {dt:.2f}s for {em} tokens ({em/dt:.2f} tok/s); predicted {pred:.2f}s for {exp:.1f} tokens ({exp/pred:.2f} tok/s)")
json.dump({"steps": steps, "observed": {str(k): v for k, v in gen.pass_costs.observed.items()},
           "verify": gen.pass_costs.verify.points, "correction": gen.pass_costs.correction,
           "draft": gen.pass_costs.draft.points, "catch_up": gen.pass_costs.catch_up}, open(sys.argv[1], "w"))
