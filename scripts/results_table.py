"""The README's results table from a `specdecode bench` results.json: one row per method and k over
all prompts, plus the code and Spec-Bench columns.

    python scripts/results_table.py RESULTS_DIR [RESULTS_DIR ...]
"""

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    return json.loads((path / "results.json").read_text())


def fmt(x, spec, unit=""):
    return "-" if x is None else format(x, spec) + unit


def main(dirs: list[str]) -> None:
    for d in dirs:
        records = rows(Path(d))
        by = {(r["method"], r["k"], r["category"]): r for r in records}
        cats = sorted({r["category"] for r in records if r["category"] != "all"})
        code = [c for c in cats if c.startswith("code")]
        print(f"| method | backend | k | tok/s | vs plain | {' | '.join(f'vs plain, {c}' for c in code)}"
              f"{' | ' if code else ''}vs llama.cpp | acceptance | tokens/pass | c |")
        print("|---" * (9 + len(code)) + "|")
        for r in [r for r in records if r["category"] == "all"]:
            cols = [by.get((r["method"], r["k"], c), {}).get("speedup_vs_plain") for c in code]
            print(f"| {r['method']} | {r.get('backend', '-')} | {'-' if r['k'] is None else r['k']} | "
                  f"{r['tokens_per_s']:.2f} | {fmt(r.get('speedup_vs_plain'), '.2f', 'x')} | "
                  + "".join(f"{fmt(c, '.2f', 'x')} | " for c in cols)
                  + f"{fmt(r.get('speedup_vs_llamacpp'), '.2f', 'x')} | {fmt(r.get('acceptance_rate'), '.0%')} | "
                  f"{fmt(r.get('mean_accepted_tokens'), '.2f')} | {fmt(r.get('draft_cost_ratio'), '.2f')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
