"""Markdown table of tokens/s and ITL per concurrency for several `bench --endpoint` runs.

    python scripts/load_table.py OUT_DIR plain ngram draft ...   (the first one is the baseline)

Each server's results are every results.json under OUT_DIR/<server> (one per concurrency level).
"""

import json
import sys
from pathlib import Path


def main(root: str, names: list[str]) -> None:
    runs = {n: {r["concurrency"]: r for f in sorted((Path(root) / n).rglob("results.json"))
                for r in json.loads(f.read_text())} for n in names}
    base = runs[names[0]]
    print("| server | concurrency | tok/s | vs " + names[0] + " | ITL p50 ms | ITL p99 ms | TTFT median s | acceptance | "
          "errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        for c, r in sorted(runs[n].items()):
            ratio = r["tokens_per_s"] / base[c]["tokens_per_s"] if c in base and base[c]["tokens_per_s"] else None
            acc = r.get("acceptance_rate")
            print(f"| {n} | {c} | {r['tokens_per_s']:.2f} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                  f"{r['itl_p50_s'] * 1000:.0f} | {r['itl_p99_s'] * 1000:.0f} | {r['ttft_s'] or 0:.2f} | "
                  f"{'-' if acc is None else f'{acc:.0%}'} | {r['errors']} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
