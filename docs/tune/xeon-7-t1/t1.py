"""Session 8, #5: k=auto at T=1 with and without the confidence stop, beside fixed k, interleaved
prompt by prompt (default pair, 12 Spec-Bench prompts x 48 tokens). Each auto variant keeps its own
pooled acceptance across prompts (as a server would); pass costs are shared (facts of the machine)."""
import json, sys
from specdecode import SamplingParams
from specdecode.loading import load_generator
from specdecode.bench.workloads import load_workload

gen = load_generator(target="default", draft="default", proposer="draft")
prompts = load_workload("spec-bench", None, int(sys.argv[2]) if len(sys.argv) > 2 else 12)
configs = [("plain", "none", 0, None), ("draft-1", "draft", 1, None), ("draft-2", "draft", 2, None),
           ("draft-auto", "draft", "auto", 0.4), ("draft-auto-nostop", "draft", "auto", 0.0),
           ("hybrid-1", "hybrid", 1, None), ("hybrid-2", "hybrid", 2, None),
           ("hybrid-auto", "hybrid", "auto", 0.4), ("hybrid-auto-nostop", "hybrid", "auto", 0.0)]
pooled = {name: {} for name, *_ in configs}
gen.generate("Hello", SamplingParams(max_new_tokens=4), k=2, proposer="hybrid")
out_rows = []
for i, p in enumerate(prompts):
    ids = gen.encode(p.turns[0])
    for name, proposer, k, stop in configs:
        params = SamplingParams(max_new_tokens=48, temperature=1.0, seed=1000 + i)
        gen.pooled_acceptance = pooled[name]
        if stop is not None:
            gen.auto_min_confidence = stop
        out = gen.generate(ids, params, k=k, chat=False, proposer=proposer)
        gen.auto_min_confidence = 0.4
        s = out.stats
        row = dict(config=name, id=p.id, cat=p.category, new=s["new_tokens"], total=s["total_s"], ttft=s["ttft_s"],
                   prefill=s["prefill_s"], draft_s=s["draft_s"], verify_s=s["verify_s"], passes=s["target_passes"],
                   by_source=s["by_source"])
        out_rows.append(row)
        print(json.dumps(row), flush=True)
json.dump(out_rows, open(sys.argv[1], "w"))
