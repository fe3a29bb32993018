"""The speed checks of one interleaved `specdecode bench` run, from its runs.jsonl: per temperature,
method and k, tokens/s over the code prompts, the Spec-Bench mix and all prompts (total new tokens
over total seconds, prefill included, as the bench's own tokens/s), against the fastest plain decoder
of that group in the same run (ours plain or llama.cpp's own loop, whichever was faster), and the
worst Spec-Bench category against it; then, per proposer, k=auto against the best fixed k of the
same proposer, both as the ratio of the pooled rates and as the median over prompts of the
per-prompt ratio (one run that the shared machine slowed down moves the first, hardly the second).

    python scripts/speed_check.py BENCH_DIR [BENCH_DIR ...]

Prints markdown.
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specdecode.bench.methods import PLAIN_METHODS as PLAIN  # the decoders that draft nothing

CODE = "code_completion"


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "runs.jsonl").read_text().splitlines() if line.strip()]


def per_prompt_ratio(runs: list[dict], method: str, k: str, other_k: str, group: str) -> float:
    """Median over the group's prompts of method@k's tokens/s over method@other_k's."""
    rate = {(r["prompt_id"], str(r["k"])): r["tokens_per_s"] for r in runs if r["method"] == method
            and group in ("all", "code" if r["category"] == CODE else "mix")}
    return statistics.median(rate[p, k] / rate[p, other_k] for p, kk in rate if kk == k and (p, other_k) in rate)


def rates(runs: list[dict]) -> tuple[float, dict]:
    sums: dict = defaultdict(lambda: [0, 0.0])
    for r in runs:
        for group in ("all", "code" if r["category"] == CODE else "mix", r["category"]):
            key = (r["method"], "-" if r["k"] is None else str(r["k"]), group)
            sums[key][0] += r["new_tokens"]
            sums[key][1] += r["total_s"]
    return runs[0]["temperature"], {key: n / s for key, (n, s) in sums.items() if s > 0}


def main(dirs: list[str]) -> None:
    for d in dirs:
        every = load(Path(d))
        for temp in sorted({r["temperature"] for r in every}):
            report([r for r in every if r["temperature"] == temp], d)


def report(runs: list[dict], d: str) -> None:
    temperature, rate = rates(runs)
    methods = sorted({(m, k) for m, k, _ in rate}, key=lambda mk: (mk[0] not in PLAIN, mk[0], mk[1]))
    categories = sorted({r["category"] for r in runs if r["category"] != CODE})

    def fastest(group):
        return max(rate[m, "-", group] for m in PLAIN if (m, "-", group) in rate)

    print(f"\n### T = {temperature:g} ({d})\n")
    print("| method | k | tok/s all | vs fastest plain: all | mix | code | worst mix category |")
    print("|---|---|---|---|---|---|---|")
    for m, k in methods:
        row = [f"{rate[m, k, 'all']:.2f}"]
        row += [f"{rate[m, k, g] / fastest(g):.2f}x" for g in ("all", "mix", "code")]
        worst = min(categories, key=lambda c: rate[m, k, c] / fastest(c)) if categories else None
        row.append(f"{worst} {rate[m, k, worst] / fastest(worst):.2f}x" if worst else "-")
        print(f"| {m} | {k} | " + " | ".join(row) + " |")
    print("\n| proposer | group | k=auto tok/s | best fixed k | its tok/s | auto / best | median per prompt |")
    print("|---|---|---|---|---|---|---|")
    for m in sorted({m for m, k in methods if k == "auto"}):
        for group in ("all", "mix", "code"):
            fixed = {k: rate[m, k, group] for mm, k in methods if mm == m and k not in ("auto", "-")}
            if not fixed:
                continue
            best = max(fixed, key=fixed.get)
            auto = rate[m, "auto", group]
            median = per_prompt_ratio(runs, m, "auto", best, group)
            print(f"| {m} | {group} | {auto:.2f} | {best} | {fixed[best]:.2f} | {auto / fixed[best]:.2f}x "
                  f"| {median:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
