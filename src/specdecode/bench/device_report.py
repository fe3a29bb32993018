"""The device check's verdicts and tables: the floor a GPU must meet, checked against what the run
measured, and the markdown docs/gpu.md shows (every figure from the run; speedups marked modelled)."""

from __future__ import annotations

WIDTHS = list(range(1, 10))  # 1 + k for k=auto's k in 0..8
# The floor for a GPU (8B-shaped target, captured runner): a one-token step near the bandwidth
# roofline, a verify pass of 5 tokens barely dearer than one token, a 1B draft step under 0.35 of it.
LIMITS = {"step_over_roofline": 2.0, "verify5_over_step": 1.2, "draft_c": 0.35}


def checks(result: dict) -> list[dict]:
    """The issue's floor on a GPU, from what was measured (nothing on a CPU rehearsal)."""
    out = []
    pair = result["pairs"].get("8b", {})
    kind = "torch-cudagraph"
    target, draft = pair.get("target", {}), pair.get("draft", {})
    if kind in target.get("step_s", {}):
        ratio = target["step_s"][kind] / target["roofline_step_s"]
        out.append({"check": "8B target step / roofline", "value": ratio, "limit": LIMITS["step_over_roofline"]})
        if "5" in target.get("verify_s", {}).get(kind, {}):
            ratio = target["verify_s"][kind]["5"] / target["step_s"][kind]
            out.append({"check": "verify width 5 / one-token step", "value": ratio, "limit": LIMITS["verify5_over_step"]})
    if kind in draft.get("step_s", {}) and kind in target.get("step_s", {}):
        out.append({"check": "draft c (1B / 8B step)", "value": draft["step_s"][kind] / target["step_s"][kind],
                    "limit": LIMITS["draft_c"]})
    for row in out:
        row["passed"] = row["value"] <= row["limit"]
    ex = result.get("exactness", {})
    if "rule" in ex and "naive" in ex:
        out.append({"check": "verify passes, --naive fails (tiny models)", "value": None, "limit": None,
                    "passed": ex["rule"].get("passed") is True and ex["naive"].get("passed") is False})
    return out


def render(result: dict) -> str:
    """The docs/gpu.md tables: every figure as measured by this run, the speedups marked modelled."""
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    lines = [f"Measured on {result['device']} (torch {result['torch']}), {result['date']}: `{result['command']}`; "
             f"copy bandwidth {result['copy_bandwidth_gbs']:.0f} GB/s, {result['context']}-token context, "
             f"bf16, random weights of {'tiny (rehearsal)' if result.get('small') else 'real'} shapes.", "",
             "| pair | model | runner | one-token step ms | roofline ms | step / roofline |", "|---|---|---|---|---|---|"]
    for pair_name, pair in result["pairs"].items():
        for role in ("target", "draft"):
            m = pair[role]
            for kind, s in m["step_s"].items():
                lines.append(f"| {pair_name} | {m['shape']} | {kind} | {ms(s)} | {ms(m['roofline_step_s'])} | "
                             f"{s / m['roofline_step_s']:.2f}x |")
    lines += ["", "Verify pass by width, as a multiple of the same runner's one-token step:", "",
              "| pair | runner | " + " | ".join(str(w) for w in WIDTHS) + " |",
              "|---|---|" + "---|" * len(WIDTHS)]
    for pair_name, pair in result["pairs"].items():
        target = pair["target"]
        for kind, curve in target["verify_s"].items():
            lines.append(f"| {pair_name} | {kind} | " + " | ".join(
                f"{curve[str(w)] / target['step_s'][kind]:.2f}" for w in WIDTHS) + " |")
    labels = list(result["acceptance"])
    if not labels:
        lines += ["", "No --acceptance given: no modelled speedups."]
    lines += ["", "c (draft step / target step) and the **modelled** speedup of draft speculation over plain "
              "decoding on the same runner, at the real default pair's per-position acceptance measured on a CPU "
              "(best k under k=auto's cost model):", "",
              "| pair | runner | c | " + " | ".join(f"{label}: k, speedup" for label in labels) + " |",
              "|---|---|---|" + "---|" * len(labels)]
    for pair_name, pair in result["pairs"].items():
        for kind, c in pair.get("c", {}).items():
            cells = [f"{pair['modelled'][kind][label]['k']}, {pair['modelled'][kind][label]['speedup']:.2f}x"
                     for label in labels]
            lines.append(f"| {pair_name} | {kind} | {c:.2f} | " + " | ".join(cells) + " |")
    ex = result.get("exactness", {})
    lines += ["", "| check | value | limit | passed |", "|---|---|---|---|"]
    for row in result.get("checks", []):
        value = "-" if row["value"] is None else f"{row['value']:.2f}"
        limit = "-" if row["limit"] is None else f"<= {row['limit']}"
        lines.append(f"| {row['check']} | {value} | {limit} | {'yes' if row['passed'] else '**no**'} |")
    for label in ("rule", "naive"):
        if label in ex and "passed" in ex[label]:
            e = ex[label]
            lines.append(f"\n`verify` ({label}) on the {e['backend']} runner: passed={e['passed']}, {e['samples']} "
                         f"samples, p = {e['p_value']:.3g}, first-token p = {e['first_token_p']:.3g}")
    if result["skipped"]:
        lines += ["", "Skipped: " + "; ".join(result["skipped"])]
    return "\n".join(lines) + "\n"
