"""Gemma-3-270M (another tokenizer) as a text-level draft beside the Q4_0 target, code prompts.
Cost: one-token steps after 200 tokens of context (c = gemma / target). Agreement: along the target's
greedy answers, gemma reads the request and the answer so far as text and writes 8 tokens greedily;
counted: the target's next tokens that text spells out.
Usage, from the repo root: .venv/bin/python THIS_FILE GEMMA.gguf"""
import json, statistics, sys, time
import numpy as np
from specdecode.models.backends.llamacpp import load_llama, requantized
from specdecode.models.registry import resolve

target = requantized(resolve("default", "target").gguf, "q4_0")
gemma = sys.argv[1]


def step_ms(llm, n=12):
    ctx = llm.tokenize(("def f(x):\n    return x\n" * 40).encode())[:200]
    llm.reset(); llm.eval(ctx)
    times = []
    for _ in range(n):
        t = time.perf_counter(); llm.eval(ctx[-1:]); times.append(time.perf_counter() - t)
    return times


T, G = load_llama(target, n_ctx=2048), load_llama(gemma, n_ctx=2048)
ts, gs = [], []
for _ in range(3):
    ts += step_ms(T); gs += step_ms(G)
t_ms, g_ms = statistics.median(ts) * 1000, statistics.median(gs) * 1000
print(f"one-token step: target {t_ms:.1f} ms, gemma {g_ms:.1f} ms, c = {g_ms / t_ms:.3f}")
del T, G
# llama-cpp-python fills `scores` only with logits_all
T, G = load_llama(target, n_ctx=1024, logits_all=True), load_llama(gemma, n_ctx=1024, logits_all=True)


def greedy(llm, ids, n):
    llm.reset(); llm.eval(ids); out = []
    for _ in range(n):
        out.append(int(np.argmax(llm.scores[llm.n_tokens - 1]))); llm.eval(out[-1:])
    return out


covered = []
for row in map(json.loads, open("src/specdecode/data/code_completion.jsonl")):
    request = row["turns"][0]
    chat = f"<|im_start|>user\n{request}<|im_end|>\n<|im_start|>assistant\n"
    pieces = [T.detokenize([t]).decode("utf-8", "replace")
              for t in greedy(T, T.tokenize(chat.encode(), add_bos=False, special=True), 64)]
    for i in range(0, 64, 2):
        text = G.detokenize(greedy(G, G.tokenize((request + "\n" + "".join(pieces[:i])).encode()), 8)).decode("utf-8", "replace")
        n = pos = 0
        for p in pieces[i:]:
            if not text.startswith(p, pos):
                break
            n, pos = n + 1, pos + len(p)
        covered.append(n)
print(f"{len(covered)} positions: the target's next token spelt out {np.mean([c > 0 for c in covered]):.0%}, "
      f"target tokens spelt out by 8 gemma tokens {statistics.mean(covered):.2f} on average")
