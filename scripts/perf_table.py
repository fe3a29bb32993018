"""Markdown tables from `bench` results for the README's Performance section.

    python scripts/perf_table.py RESULTS.json [CATEGORY ...]

One row per (method, k) and category: backend, tokens/s, speedup over plain decoding on the same
backend (ours `plain` for torch targets, `llamacpp` for llama.cpp), over transformers assisted
generation and over llama.cpp, the draft cost ratio c and the acceptance; then the decode alone
(tokens over the time after the prefill; `-` where a peer does not report its prefill) against
plain's, and the median time to first token.
"""

import json
import sys


def fmt(x, spec=".2f", suffix=""):
    return "-" if x is None else f"{x:{spec}}{suffix}"


def decode_rate(r: dict) -> float | None:
    if not r.get("prefill_s"):
        return None
    return r["new_tokens"] / (r["total_s"] - r["prefill_s"])


def main(path: str, categories: list[str]) -> None:
    records = json.loads(open(path).read())
    cats = categories or sorted({r["category"] for r in records}, key=lambda c: (c != "all", c))
    for cat in cats:
        rows = [r for r in records if r["category"] == cat]
        by = {(r["method"], r["k"], r["temperature"]): r for r in rows}
        print(f"\n**{cat}**\n")
        print("| method | backend | k | T | tok/s | vs plain | vs hf-assisted | vs llamacpp | c | acceptance "
              "| decode tok/s | decode vs plain | TTFT ms |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            assisted = by.get(("hf-assisted", None, r["temperature"]))
            vs_assisted = r["tokens_per_s"] / assisted["tokens_per_s"] if assisted else None
            plain = by.get(("plain", None, r["temperature"]))
            decode, plain_decode = decode_rate(r), plain and decode_rate(plain)
            decode_vs_plain = decode / plain_decode if decode and plain_decode else None
            print(f"| {r['method']} | {r['backend']} | {'-' if r['k'] is None else r['k']} | {r['temperature']:g} | "
                  f"{r['tokens_per_s']:.2f} | {fmt(r['speedup_vs_plain'], suffix='x')} | "
                  f"{fmt(vs_assisted, suffix='x')} | {fmt(r.get('speedup_vs_llamacpp'), suffix='x')} | "
                  f"{fmt(r['draft_cost_ratio'])} | {fmt(r['acceptance_rate'], '.0%')} | {fmt(decode)} | "
                  f"{fmt(decode_vs_plain, suffix='x')} | {fmt(r['ttft_s'] and r['ttft_s'] * 1000, '.0f')} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
