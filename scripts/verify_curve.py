"""Seconds of one target verify pass by width, a chain against a tree of the same width (two
branches, so the tree goes through the 4D mask), on the default torch target over a 200-token
context. Median of 3 timed passes after one warm-up per point.

    python scripts/verify_curve.py OUT.json
"""

import json
import statistics
import sys
import time

from specdecode.loading import load_generator

WIDTHS = (1, 2, 4, 8, 12, 16)


def main(path: str) -> None:
    runner = load_generator(target="default", draft=None, proposer="none", dtype="auto").target
    prompt = list(range(1000, 1200))
    out = {}
    for w in WIDTHS:
        feed = prompt[-1:] + list(range(2000, 2000 + w - 1))
        tree = [[-1] + [0 if i == w // 2 else i - 1 for i in range(1, w)]]
        for kind, parents in (("chain", None), ("tree", tree)):
            times = []
            for _ in range(4):
                runner.add_rows(prompt[:-1])
                start = time.perf_counter()
                runner.forward([feed]) if parents is None else runner.forward([feed], parents=parents)
                times.append(time.perf_counter() - start)
                runner.remove_rows([0])
            out[f"{kind}{w}"] = statistics.median(times[1:])
        print(w, f"chain {out[f'chain{w}'] * 1000:.1f} ms, tree {out[f'tree{w}'] * 1000:.1f} ms", flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
