"""Our llama.cpp runner's one-token pass against llama-cpp-python's own `eval`, same GGUF, same
200-token context, 6 interleaved rounds of 10 passes each (median per round, then median of rounds);
then whole greedy generations (32 tokens) through our engine and through llama-cpp-python's
`generate`, 4 interleaved rounds. Run from the repository root: .venv/bin/python THIS_FILE."""
import statistics
import time

import llama_cpp

from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.backends import llamacpp as L
from specdecode.models.registry import cache_dir

GGUF = next((cache_dir() / "gguf").glob("qwen2.5-coder-1.5b-instruct-q4_k_m@q4_0.gguf"))
runner, llm = L.LlamaCppRunner.load(GGUF, n_ctx=4096, max_rows=16), L.load_llama(GGUF, n_ctx=4096)
context = list(range(1000, 1200))
runner.add_rows(context)
llm.eval(context)
passes = {"runner": [], "llama-cpp-python eval": []}
for _ in range(6):
    times = []
    for i in range(10):
        t = time.perf_counter(); runner.forward([[5 + i]]); times.append(time.perf_counter() - t)
        runner.rollback([1])
    passes["runner"].append(statistics.median(times))
    times = []
    for i in range(10):
        t = time.perf_counter(); llm.eval([5 + i]); times.append(time.perf_counter() - t)
        llm.n_tokens -= 1
        llama_cpp.llama_memory_seq_rm(llm._ctx.memory, 0, llm.n_tokens, -1)
    passes["llama-cpp-python eval"].append(statistics.median(times))
for name, v in passes.items():
    print(f"one-token pass, {name}: {1000 * statistics.median(v):.1f} ms (rounds {[round(1000 * x, 1) for x in v]})")
runner.close()

gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft=None, proposer="ngram")
prompt = gen.tokenizer.encode('def quicksort(arr):\n    """Sort a list of integers and return a new list."""\n')
params = SamplingParams(temperature=0.0, max_new_tokens=32, ignore_eos=True)
tpot = {"engine": [], "llama-cpp-python generate": []}
for _ in range(4):
    steps = gen.generate(prompt, params, k=0, chat=False, proposer="none").stats["steps"]
    tpot["engine"].append((steps[-1][0] - steps[0][0]) / (len(steps) - 1))
    llm.reset()
    stamps, start = [], time.perf_counter()
    for _token in llm.generate(prompt, temp=0.0, top_k=0, repeat_penalty=1.0):
        stamps.append(time.perf_counter() - start)
        if len(stamps) >= 32:
            break
    tpot["llama-cpp-python generate"].append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
for name, v in tpot.items():
    print(f"TPOT, {name}: {1000 * statistics.median(v):.1f} ms (rounds {[round(1000 * x, 1) for x in v]})")
