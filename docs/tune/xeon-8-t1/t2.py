"""Session 9, #5: k=auto at T=1 learning acceptance from each draft's chance min(1, p/q) (the
change) against learning it from the sampler's coins (before), beside fixed k, interleaved prompt by
prompt (default pair, Spec-Bench prompts x 48 tokens, T=1). Each config keeps its own pooled
acceptance across prompts, as a server would; pass costs are shared (facts of the machine).
usage: python t2.py OUT.jsonl [N_PROMPTS]"""
import json, sys
from specdecode import SamplingParams
from specdecode.loading import load_generator
from specdecode.bench.workloads import load_workload
from specdecode.load_policy import AcceptanceTracker

chance_update = AcceptanceTracker.update


def coin_update(self, drafted, accepted, chances=None):
    return chance_update(self, drafted, accepted, None)


gen = load_generator(target="default", draft="default", proposer="draft")
prompts = load_workload("spec-bench", None, int(sys.argv[2]) if len(sys.argv) > 2 else 18)
configs = [("plain", "none", 0, False), ("draft-1", "draft", 1, False), ("draft-auto", "draft", "auto", False),
           ("draft-auto-coins", "draft", "auto", True), ("hybrid-1", "hybrid", 1, False),
           ("hybrid-2", "hybrid", 2, False), ("hybrid-auto", "hybrid", "auto", False),
           ("hybrid-auto-coins", "hybrid", "auto", True)]
pooled = {name: {} for name, *_ in configs}
gen.generate("Hello", SamplingParams(max_new_tokens=4), k=2, proposer="hybrid")
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(prompts):
        ids = gen.encode(p.turns[0])
        for name, proposer, k, coins in configs:
            params = SamplingParams(max_new_tokens=48, temperature=1.0, seed=1000 + i)
            gen.pooled_acceptance = pooled[name]
            AcceptanceTracker.update = coin_update if coins else chance_update
            try:
                out = gen.generate(ids, params, k=k, chat=False, proposer=proposer)
            finally:
                AcceptanceTracker.update = chance_update
            s = out.stats
            row = dict(config=name, id=p.id, cat=p.category, new=s["new_tokens"], total=s["total_s"],
                       ttft=s["ttft_s"], prefill=s["prefill_s"], draft_s=s["draft_s"], verify_s=s["verify_s"],
                       passes=s["target_passes"], by_source=s["by_source"])
            f.write(json.dumps(row) + "\n")
            f.flush()
