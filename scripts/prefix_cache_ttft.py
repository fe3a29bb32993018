"""TTFT of chat requests that share a long system prompt, with the prefix cache and without.

One set of loaded models, two engines over them (prefix cache off / on), requests alternating
between them (ABBA), each with the same ~1,000-token system prompt and its own question. The first
request of the cached engine fills the cache (reported apart, as "cold"); the others reuse it.

    .venv/bin/python scripts/prefix_cache_ttft.py OUT.json [ROUNDS] [SYSTEM_TOKENS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from specdecode import SamplingParams
from specdecode.models.backends.hf import parse_dtype
from specdecode.bench.report import environment
from specdecode.models.generator import build_generator, load_models
from specdecode.engine.prompts import chat_ids

RULES = [
    "Answer in the customer's language and keep replies under 120 words.",
    "Never promise a refund before the order status says delivered or lost.",
    "Orders ship from Rotterdam, Austin or Singapore depending on the region.",
    "Premium members get free returns within 60 days; others within 30 days.",
    "Escalate any message that mentions a safety problem to a human at once.",
    "Quote prices with their currency and say whether tax is included.",
    "Do not ask for passwords or full card numbers; the last four digits suffice.",
    "When an item is out of stock, offer the two closest alternatives by price.",
    "Summarise the customer's problem in one sentence before proposing a fix.",
    "Use the order number format AB-123456 when you refer to an order.",
]
QUESTIONS = [
    "My order AB-204811 has not arrived after two weeks. What can I do?",
    "Can I return a jacket I bought 45 days ago? I am a premium member.",
    "The kettle I received sparks when I switch it on.",
    "Is the price on your website with or without VAT?",
    "The blue backpack is sold out. What else do you have?",
    "I want to change the delivery address of order AB-339120.",
    "Do you ship to Chile, and from which warehouse?",
    "I was charged twice for the same order.",
]


def system_prompt(tokenizer, tokens: int) -> str:
    lines, i = ["You are the support assistant of Northwind Outfitters. Follow these rules."], 0
    while len(tokenizer("\n".join(lines))["input_ids"]) < tokens:
        lines.append(f"Rule {i + 1}: {RULES[i % len(RULES)]} (section {i // len(RULES) + 1})")
        i += 1
    return "\n".join(lines)


def main(out_path: str, rounds: int = 4, system_tokens: int = 1000) -> None:
    target_model, tok, draft_model, draft_tok = load_models("default", "default", "auto")
    gens = {size: build_generator(target_model, tok, "draft", draft_model, draft_tok, prefix_cache=size)
            for size in (0, 4096)}
    system = system_prompt(tok, system_tokens)
    params = SamplingParams(max_new_tokens=4)
    for gen in gens.values():  # untimed warm-up on another prompt
        gen.generate("Hello", params, k=4)
    runs = {0: [], 4096: []}
    order = [0, 4096, 4096, 0]
    for r in range(rounds):
        for j, size in enumerate(order):
            question = QUESTIONS[(2 * r + j // 2) % len(QUESTIONS)]
            ids = chat_ids(tok, [{"role": "system", "content": system}, {"role": "user", "content": question}])
            t0 = time.perf_counter()
            out = gens[size].generate(ids, params, k=4, chat=False)
            runs[size].append({"ttft_s": out.stats["ttft_s"], "prefill_s": out.stats["prefill_s"],
                               "prompt_tokens": len(ids), "wall_s": time.perf_counter() - t0})
    cold, warm = runs[4096][0], runs[4096][1:]
    off = statistics.median(x["ttft_s"] for x in runs[0])
    on = statistics.median(x["ttft_s"] for x in warm)
    result = {
        "machine": environment(parse_dtype("auto"), parse_dtype("auto"), "default", "default"),
        "system_prompt_tokens": len(tok(system)["input_ids"]),
        "prompt_tokens_median": statistics.median(x["prompt_tokens"] for x in runs[0]),
        "ttft_off_median_s": off, "ttft_on_median_s": on, "ttft_on_cold_s": cold["ttft_s"],
        "speedup": off / on,
        "target_cache": gens[4096].target.prefix_cache.stats(),
        "draft_cache": gens[4096].proposers["draft"].runner.prefix_cache.stats(),
        "runs": {"off": runs[0], "on": runs[4096]},
    }
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"TTFT median without the prefix cache {off * 1000:.0f} ms, with it {on * 1000:.0f} ms "
          f"({off / on:.1f}x; cold {cold['ttft_s'] * 1000:.0f} ms); prompts of "
          f"{result['prompt_tokens_median']:.0f} tokens, system prompt {result['system_prompt_tokens']}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(x) for x in sys.argv[2:]))
