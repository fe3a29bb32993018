"""Table for scripts/server_vs_generate.sh: the server at concurrency 1 against `bench` (generate),
pooled over the rounds (means of the rounds' overall rows).

    python scripts/server_vs_generate.py OUT_DIR
"""

import json
import statistics
import sys
from pathlib import Path


def overall(path: Path) -> dict:
    rows = json.loads((path / "results.json").read_text())
    return next(r for r in rows if r.get("category") == "all" and r.get("method") != "plain")


def main(out: str) -> None:
    root = Path(out)
    sides = {}
    for side in ("server", "generate"):
        runs = [overall(p) for p in sorted(root.glob(f"{side}-*")) if (p / "results.json").is_file()]
        sides[side] = {key: statistics.mean(r[key] for r in runs) for key in ("tokens_per_s", "tpot_s", "ttft_s")}
        sides[side]["rounds"] = len(runs)
        sides[side]["errors"] = sum(r.get("errors", 0) for r in runs)
    print("| side | rounds | tok/s | TPOT ms | TTFT s | errors |")
    print("|---|---|---|---|---|---|")
    for side, s in sides.items():
        print(f"| {side} | {s['rounds']} | {s['tokens_per_s']:.2f} | {s['tpot_s'] * 1000:.0f} | {s['ttft_s']:.2f} | "
              f"{s['errors']} |")
    ratio = sides["server"]["tokens_per_s"] / sides["generate"]["tokens_per_s"]
    print(f"\nserver / generate tokens/s: {ratio:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1])
