"""Flash attention on and off: two llama-cpp-python contexts over the target's Q4_0 GGUF in one process,
alternating rounds, medians. Prefill of 80 / 300 tokens; passes of 1/2/4/8 tokens after 80 / 300.
Run: .venv/bin/python docs/results/xeon-amx-7/flash_attention_ab.py"""
import statistics, time, json, random
import llama_cpp
from specdecode.models.registry import resolve
from specdecode.models.backends import llamacpp as L

gguf = L.requantized(resolve("default", "target").gguf, "q4_0")
ctx = {}
for fa in (False, True):
    L.FLASH_ATTN = fa
    ctx[fa] = L.load_llama(gguf, n_ctx=1024)
rng = random.Random(0)
toks = [rng.randrange(100, 20000) for _ in range(400)]
res = {fa: {} for fa in ctx}
def timed(llm, ids):
    t = time.perf_counter(); llm.eval(ids); return time.perf_counter() - t
for rnd in range(6):
    for fa in ((False, True) if rnd % 2 == 0 else (True, False)):
        llm = ctx[fa]
        for n in (80, 300):
            llm.reset(); llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm._ctx.ctx), -1, -1, -1)
            res[fa].setdefault(f"prefill {n}", []).append(timed(llm, toks[:n]))
            for w in (1, 2, 4, 8):
                base = llm.n_tokens
                reps = []
                for _ in range(3):
                    reps.append(timed(llm, toks[300:300 + w]))
                    llm.n_tokens = base
                    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(llm._ctx.ctx), -1, base, -1)
                res[fa].setdefault(f"pass {w} after {n}", []).append(min(reps))
out = {("on" if fa else "off"): {k: round(1000 * statistics.median(v), 1) for k, v in r.items()} for fa, r in res.items()}
print(json.dumps(out, indent=1))
