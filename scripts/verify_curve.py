"""Seconds of one target verify pass by width over a 200-token context, for each target runtime
given (default: torch bf16 / fp32 / int8 / w8a8 and llama.cpp Q4_K_M / Q4_0 / Q8_0 of the default target);
where the runner has tree attention, also a tree of the same width (two branches, so it goes
through the 4D mask). Median of 3 timed passes after one warm-up per point.

    python scripts/verify_curve.py OUT.json [SPEC[/DTYPE] ...]     e.g. default/bf16 llamacpp:default@q8_0
"""

import json
import statistics
import sys
import time

from specdecode.models.generator import load_generator

WIDTHS = (1, 2, 4, 8, 12, 16)
RUNTIMES = ("default/bf16", "default/fp32", "default/int8", "default/w8a8", "llamacpp:default", "llamacpp:default@q4_0",
            "llamacpp:default@q8_0")


def timed(runner, prompt, feed, parents=None) -> float:
    times = []
    for _ in range(4):
        runner.add_rows(prompt[:-1])
        start = time.perf_counter()
        runner.forward([feed]) if parents is None else runner.forward([feed], parents=parents)
        times.append(time.perf_counter() - start)
        runner.remove_rows([0])
    return statistics.median(times[1:])


def curve(spec: str) -> dict:
    target, _, dtype = spec.partition("/")
    runner = load_generator(target=target, draft=None, proposer="none", dtype=dtype or "auto").target
    prompt = list(range(1000, 1200))
    out = {}
    for w in WIDTHS:
        feed = prompt[-1:] + list(range(2000, 2000 + w - 1))
        out[f"chain{w}"] = timed(runner, prompt, feed)
        line = f"{spec} width {w}: chain {out[f'chain{w}'] * 1000:.1f} ms"
        if getattr(runner, "trees", False):
            tree = [[-1] + [0 if i == w // 2 else i - 1 for i in range(1, w)]]
            out[f"tree{w}"] = timed(runner, prompt, feed, tree)
            line += f", tree {out[f'tree{w}'] * 1000:.1f} ms"
        print(line, flush=True)
    return out


def main(path: str, specs: list[str]) -> None:
    out = {spec: curve(spec) for spec in specs}
    with open(path, "w") as f:
        json.dump(out if len(specs) > 1 else out[specs[0]], f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(RUNTIMES))
