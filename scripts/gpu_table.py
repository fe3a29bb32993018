"""Tables and a plot from scripts/gpu_costs.py's JSON: step latency against the roofline, the
verify-cost curve, the draft's relative cost c, and speedups modelled at given acceptance rates.

    python scripts/gpu_table.py OUT_DIR RUN.json [RUN2.json ...]   (writes OUT_DIR/README.md, verify_cost.png)

Several runs (e.g. a second one for what the first lease left out) merge: a later run only adds the
entries an earlier one lacks.

The modelled speedup uses tune's formula with i.i.d. acceptance a per draft position:
tokens per pass = (1 - a^(k+1)) / (1 - a), pass = k draft steps + a verify pass of k+1 tokens, against
one plain step of the same runner. Random weights cannot give acceptance; the rates are inputs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RATES = (0.6, 0.7, 0.8)


def modelled_speedup(step_s: float, draft_s: float, verify_s: dict[int, float], a: float, k: int) -> float:
    tokens = (1 - a ** (k + 1)) / (1 - a)
    return tokens * step_s / (k * draft_s + verify_s[k + 1])


def merged(paths: list[str]) -> dict:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    for run in runs:  # a compiled curve has no width 1 of its own: it is that run's one-token step
        t = run["models"]["target"]
        for kind, curve in t["verify_s"].items():
            if "1" not in curve and kind in t["step_s"]:
                curve["1"] = t["step_s"][kind]
    d = runs[0]
    for later in runs[1:]:
        for role, m in later["models"].items():
            for key in ("step_s", "compile_s", "verify_s"):
                for kind, value in m[key].items():
                    d["models"][role][key].setdefault(kind, value)
        d["skipped"] = [s for s in d.get("skipped", []) if not s.startswith("compiled verify")] + later.get("skipped", [])
    return d


def main(out: str, *paths: str) -> None:
    d = merged(list(paths))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t, dr = d["models"]["target"], d["models"]["draft"]
    lines = [f"# Costs on {d['device']} (torch {d['torch']}, bf16, context {d['context']} tokens)", "",
             f"Measured copy bandwidth: **{d['copy_bandwidth_gbs']:.0f} GB/s** (device-to-device, read + write). "
             "Roofline = bytes one decode step reads (weights, KV cache) / that bandwidth.", "",
             "| model | params | bytes read per step | roofline | runner | step | step / roofline | compile |",
             "|---|---|---|---|---|---|---|---|"]
    for role, m in (("target", t), ("draft", dr)):
        for kind, s in m["step_s"].items():
            compile_s = m["compile_s"].get(kind)
            lines.append(f"| {m['shape']} | {m['params'] / 1e9:.2f} B | "
                         f"{(m['weight_bytes_read'] + m['kv_bytes_read']) / 1e9:.2f} GB | "
                         f"{m['roofline_step_s'] * 1e3:.2f} ms | {kind} | {s * 1e3:.2f} ms | "
                         f"{s / m['roofline_step_s']:.2f}x | {f'{compile_s:.0f} s' if compile_s else '-'} |")
    lines += ["", "Draft cost per token relative to the target's one-token step, same runner (c):", "",
              "| runner | c |", "|---|---|"]
    for kind in t["step_s"]:
        if kind in dr["step_s"]:
            lines.append(f"| {kind} | {dr['step_s'][kind] / t['step_s'][kind]:.2f} |")
    lines += ["", "Verify pass of the target by width (tokens scored), relative to its one-token pass:", "",
              "| runner | " + " | ".join(f"w={w}" for w in (1, 2, 4, 5, 8, 9, 16, 32, 64)) + " |",
              "|---|" + "---|" * 9]
    for kind, curve in t["verify_s"].items():
        base = curve["1"]
        cells = [f"{curve[str(w)] / base:.2f} ({curve[str(w)] * 1e3:.1f} ms)" if str(w) in curve else "-"
                 for w in (1, 2, 4, 5, 8, 9, 16, 32, 64)]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "Modelled speedup over plain decoding with the same runner (draft model, k drafts, "
              "i.i.d. acceptance a):", "", "| runner | a | " + " | ".join(f"k={k}" for k in range(1, 9)) + " |",
              "|---|---|" + "---|" * 8]
    for kind in t["verify_s"]:
        if kind not in dr["step_s"]:
            continue
        verify = {int(w): s for w, s in t["verify_s"][kind].items()}
        for a in RATES:
            cells = [f"{modelled_speedup(verify[1], dr['step_s'][kind], verify, a, k):.2f}"
                     if k + 1 in verify else "-" for k in range(1, 9)]
            lines.append(f"| {kind} | {a} | " + " | ".join(cells) + " |")
    if d.get("skipped"):
        lines += ["", "Not measured: " + "; ".join(d["skipped"])]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, curve in t["verify_s"].items():
        widths = sorted(int(w) for w in curve)
        ax.plot(widths, [curve[str(w)] * 1e3 for w in widths], marker="o", label=f"verify, {kind}")
    for kind, s in t["step_s"].items():
        ax.axhline(s * 1e3, linestyle=":", color="grey")
        ax.annotate(f"1-token step, {kind}", (1, s * 1e3), fontsize=7, va="bottom")
    ax.axhline(t["roofline_step_s"] * 1e3, color="red", linestyle="--", label="roofline (weights / bandwidth)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens scored in one pass")
    ax.set_ylabel("ms")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{t['shape']} target on {d['device']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "verify_cost.png", dpi=120)
    print((out_dir / "README.md").read_text())


if __name__ == "__main__":
    main(*sys.argv[1:])
