"""The speed checks of saved `specdecode bench` runs (`specdecode report DIR`), read from runs.jsonl.

Per temperature: each method and k's tokens/s over all prompts, the code prompts and the rest (the
"mix"), as total new tokens over total seconds (prefill included, as the bench's own tokens/s),
against the fastest plain decoder of that group in the same run (ours plain, llama.cpp's own loop or
its server, whichever was fastest), the median over prompts of the per-prompt ratio to that decoder,
and the worst non-code category against it. Then, per proposer, k=auto against the best fixed k of
the same proposer, the same two ways. One request slowed by a shared machine moves a pooled rate,
hardly the median: where the two disagree, the run was disturbed, not the method.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .methods import PLAIN_METHODS
from .runner import aggregate

CODE = "code_completion"
GROUPS = ("all", "mix", "code")


class ReportError(ValueError):
    """The folder holds no bench runs to report on."""


def load_runs(folder: str | Path) -> list[dict]:
    path = Path(folder) / "runs.jsonl"
    if not path.is_file():
        raise ReportError(f"no {path}: give the --out folder of a `specdecode bench` run")
    try:
        runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path} is not JSON lines ({exc}): was it written by `specdecode bench`?") from exc
    if not runs:
        raise ReportError(f"{path} holds no runs yet")
    return runs


def group_of(run: dict) -> str:
    return "code" if run["category"] == CODE else "mix"


def k_label(k) -> str:
    return "-" if k is None else str(k)


def prompt_rates(runs: list[dict], group: str) -> dict[tuple, float]:
    """tokens/s by (method, k label, prompt, turn, repeat) over the group's runs."""
    return {(r["method"], k_label(r["k"]), r["prompt_id"], r.get("turn", 0), r.get("repeat", 0)): r["tokens_per_s"]
            for r in runs if group in ("all", group_of(r))}


def median_prompt_ratio(rates: dict[tuple, float], arm: tuple[str, str], other: tuple[str, str]) -> float | None:
    """Median over prompts (each turn and repeat apart) of arm's tokens/s over other's, from
    prompt_rates; an arm is (method, k label)."""
    ratios = [rate / rates[(*other, *key[2:])] for key, rate in rates.items()
              if key[:2] == arm and (*other, *key[2:]) in rates]
    return statistics.median(ratios) if ratios else None


def speed_checks(runs: list[dict]) -> list[dict]:
    """One check per temperature: {"temperature", "fastest_plain", "methods", "auto_vs_fixed"}.
    The pooled rates and the fastest plain decoder are the bench report's own (runner.aggregate),
    over the groups (all, code, mix) and over the categories."""
    groups = aggregate([{**r, "category": group_of(r)} for r in runs])
    categories = [r for r in aggregate(runs) if r["category"] not in ("all", CODE)]
    return [checks_at(t, [r for r in runs if r["temperature"] == t],
                      [g for g in groups if g["temperature"] == t], [c for c in categories if c["temperature"] == t])
            for t in sorted({r["temperature"] for r in runs})]


def checks_at(temperature: float, runs: list[dict], groups: list[dict], categories: list[dict]) -> dict:
    rate = {(g["method"], k_label(g["k"]), g["category"]): g for g in groups}
    against = {(c["method"], k_label(c["k"]), c["category"]): c["speedup_vs_fastest_plain"] for c in categories
               if c["speedup_vs_fastest_plain"] is not None}
    fastest = {g["category"]: {"method": g["method"], "tokens_per_s": g["tokens_per_s"]} for g in groups
               if g["k"] is None and g["method"] == g["fastest_plain"]}
    order = sorted({(m, k) for m, k, _ in rate}, key=lambda mk: (mk[0] not in PLAIN_METHODS, mk[0], mk[1]))
    rates = {g: prompt_rates(runs, g) for g in GROUPS}
    methods = []
    for m, k in order:
        vs = {g: rate[m, k, g]["speedup_vs_fastest_plain"] for g in GROUPS
              if (m, k, g) in rate and rate[m, k, g]["speedup_vs_fastest_plain"] is not None}
        worst = min(((c, x) for (mm, kk, c), x in against.items() if (mm, kk) == (m, k)),
                    key=lambda cx: cx[1], default=None)
        median = median_prompt_ratio(rates["all"], (m, k), (fastest["all"]["method"], "-")) if "all" in fastest else None
        methods.append({"method": m, "k": k, "tokens_per_s": rate[m, k, "all"]["tokens_per_s"], "vs_fastest_plain": vs,
                        "median_prompt_vs_fastest_plain": median,
                        "worst_category": None if worst is None else
                        {"category": worst[0], "vs_fastest_plain": worst[1]}})
    auto_vs_fixed = []
    for m in sorted({m for m, k in order if k == "auto"}):
        for group in GROUPS:
            fixed = {k: rate[m, k, group]["tokens_per_s"] for mm, k in order
                     if mm == m and k not in ("auto", "-") and (m, k, group) in rate}
            if not fixed or (m, "auto", group) not in rate:
                continue
            best = max(fixed, key=fixed.get)
            auto = rate[m, "auto", group]["tokens_per_s"]
            auto_vs_fixed.append({"method": m, "group": group, "auto_tokens_per_s": auto,
                                  "best_fixed_k": best, "best_fixed_tokens_per_s": fixed[best],
                                  "ratio": auto / fixed[best],
                                  "median_prompt_ratio": median_prompt_ratio(rates[group], (m, "auto"), (m, best))})
    return {"temperature": temperature, "fastest_plain": {g: fastest[g] for g in GROUPS if g in fastest},
            "methods": methods, "auto_vs_fixed": auto_vs_fixed}


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def markdown(checks: list[dict], source: str = "") -> str:
    """The checks as the markdown tables docs/performance.md cites."""
    lines: list[str] = []
    for c in checks:
        plain = ", ".join(f"{g} {v['method']} {v['tokens_per_s']:.2f} tok/s" for g, v in c["fastest_plain"].items())
        lines += [f"### T = {c['temperature']:g}{f' ({source})' if source else ''}", "",
                  f"Fastest plain decoder per group: {plain}.", "",
                  "| method | k | tok/s all | vs fastest plain: all | median per prompt | mix | code | worst mix category |",
                  "|---|---|---|---|---|---|---|---|"]
        for m in c["methods"]:
            vs, worst = m["vs_fastest_plain"], m["worst_category"]
            lines.append(f"| {m['method']} | {m['k']} | {m['tokens_per_s']:.2f} | {ratio(vs.get('all'))} | "
                         f"{ratio(m['median_prompt_vs_fastest_plain'])} | "
                         + " | ".join(ratio(vs.get(g)) for g in GROUPS[1:])
                         + f" | {worst['category'] + ' ' + ratio(worst['vs_fastest_plain']) if worst else '-'} |")
        if c["auto_vs_fixed"]:
            lines += ["", "| proposer | group | k=auto tok/s | best fixed k | its tok/s | auto / best | median per prompt |",
                      "|---|---|---|---|---|---|---|"]
            for a in c["auto_vs_fixed"]:
                lines.append(f"| {a['method']} | {a['group']} | {a['auto_tokens_per_s']:.2f} | {a['best_fixed_k']} | "
                             f"{a['best_fixed_tokens_per_s']:.2f} | {ratio(a['ratio'])} | "
                             f"{ratio(a['median_prompt_ratio'])} |")
        lines.append("")
    return "\n".join(lines)
