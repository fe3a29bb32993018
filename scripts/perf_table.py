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

from k_check import decode_rate  # this folder is on sys.path when a script in it runs


def fmt(x, spec=".2f", suffix=""):
    return "-" if x is None else f"{x:{spec}}{suffix}"


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
            # Peers that do not report their prefill (transformers' generate) get no decode rate.
            decode = decode_rate(r) if r.get("prefill_s") else None
            plain_decode = decode_rate(plain) if plain and plain.get("prefill_s") else None
            decode_vs_plain = decode / plain_decode if decode and plain_decode else None
            print(f"| {r['method']} | {r['backend']} | {'-' if r['k'] is None else r['k']} | {r['temperature']:g} | "
                  f"{r['tokens_per_s']:.2f} | {fmt(r['speedup_vs_plain'], suffix='x')} | "
                  f"{fmt(vs_assisted, suffix='x')} | {fmt(r.get('speedup_vs_llamacpp'), suffix='x')} | "
                  f"{fmt(r['draft_cost_ratio'])} | {fmt(r['acceptance_rate'], '.0%')} | {fmt(decode)} | "
                  f"{fmt(decode_vs_plain, suffix='x')} | {fmt(r['ttft_s'] and r['ttft_s'] * 1000, '.0f')} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
