"""Markdown table of tokens/s and ITL per concurrency for several `bench --endpoint` runs.

    python scripts/load_table.py OUT_DIR plain ngram draft ...   (the first one is the baseline)

A server's results are every results.json under OUT_DIR/<server>; the runs of one concurrency
level (load_test.sh runs each level in rounds, alternating the servers) are pooled: tokens/s is
all tokens over all wall time, the latencies are recomputed from every request's token timestamps
(runs.jsonl beside each results.json).
"""

import json
import sys
from pathlib import Path

from specdecode.bench import metrics


def pooled(root: Path) -> dict[int, dict]:
    levels: dict[int, dict] = {}
    for f in sorted(root.rglob("results.json")):
        runs = [json.loads(line) for line in (f.parent / "runs.jsonl").read_text().splitlines() if line.strip()]
        for r in json.loads(f.read_text()):
            c = r["concurrency"]
            lv = levels.setdefault(c, {"tokens": 0.0, "wall": 0.0, "errors": 0, "drafted": 0.0, "accepted": 0.0,
                                       "requests": []})
            lv["tokens"] += r["tokens_per_s"] * r["wall_s"]
            lv["wall"] += r["wall_s"]
            lv["errors"] += r["errors"]
            delta = r.get("spec_counters_delta") or {}
            lv["drafted"] += delta.get("spec_decode_num_draft_tokens", 0.0)
            lv["accepted"] += delta.get("spec_decode_num_accepted_tokens", 0.0)
            lv["requests"] += [x for x in runs if x["concurrency"] == c and x["ok"] and x["steps"]]
    for lv in levels.values():
        reqs = lv.pop("requests")
        lv.update(metrics.latency_summary([metrics.ttft(x["steps"]) for x in reqs],
                                          [t for x in reqs for t in metrics.itl_per_token(x["steps"])], []))
        lv["tokens_per_s"] = lv["tokens"] / lv["wall"] if lv["wall"] else 0.0
        lv["acceptance"] = lv["accepted"] / lv["drafted"] if lv["drafted"] else None
    return levels


def main(root: str, names: list[str]) -> None:
    runs = {n: pooled(Path(root) / n) for n in names}
    base = runs[names[0]]
    print("| server | concurrency | tok/s | vs " + names[0] + " | ITL p50 ms | ITL p99 ms | TTFT median s | acceptance | "
          "errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in names:
        for c, r in sorted(runs[n].items()):
            ratio = r["tokens_per_s"] / base[c]["tokens_per_s"] if c in base and base[c]["tokens_per_s"] else None
            acc = r["acceptance"]
            print(f"| {n} | {c} | {r['tokens_per_s']:.2f} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                  f"{r['itl_p50_s'] * 1000:.0f} | {r['itl_p99_s'] * 1000:.0f} | {r['ttft_s'] or 0:.2f} | "
                  f"{'-' if acc is None else f'{acc:.0%}'} | {r['errors']} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
