"""Benchmark outputs: results.json, runs.jsonl, report.md and PNG plots."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch
import transformers

RESULT_KEYS = (
    "method", "k", "temperature", "category", "tokens_per_s", "speedup_vs_fastest_plain", "fastest_plain",
    "speedup_vs_plain", "ttft_s", "itl_p50_s", "itl_p90_s", "itl_p99_s", "tpot_s", "acceptance_rate", "mean_accepted_tokens", "per_position_acceptance",
    "peak_rss_bytes", "tree",
)


def environment(dtype: str, draft_dtype: str, target: str, draft: str) -> dict:
    from ..models.backends.dtype_choice import cpu_description

    cpu = cpu_description()
    return {
        "cpu": cpu["cpu"],
        "cpu_flags": cpu["flags"],
        "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "dtype": dtype,
        "draft_dtype": draft_dtype,
        "target": target,
        "draft": draft,
    }


def write_outputs(out_dir: Path, records: list[dict], runs: list[dict], env: dict, config: dict,
                  skipped: dict[str, str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(records, indent=1) + "\n")
    with open(out_dir / "runs.jsonl", "w") as fh:
        for r in runs:
            fh.write(json.dumps(r) + "\n")
    (out_dir / "meta.json").write_text(json.dumps({"environment": env, "config": config, "skipped": skipped},
                                                  indent=1) + "\n")
    plots = write_plots(out_dir, records, runs)
    (out_dir / "report.md").write_text(markdown(records, env, config, skipped, plots))
    return plots


def _fmt(v, spec=".2f", scale=1.0, suffix=""):
    return "-" if v is None else f"{v * scale:{spec}}{suffix}"


def markdown(records: list[dict], env: dict, config: dict, skipped: dict[str, str], plots: list[Path]) -> str:
    lines = ["# specdecode bench report", ""]
    if config.get("interrupted"):
        lines += [f"**Interrupted**: {config['runs_finished']} of {config['runs_planned']} runs, the prompts every "
                  f"method finished.", ""]
    lines += ["## Environment", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in env.items()]
    lines += ["", "## Configuration", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in config.items()]
    if skipped:
        lines += ["", "## Skipped methods", ""] + [f"- `{m}`: {why}" for m, why in skipped.items()]
    lines += ["", "Inter-token latency is per token: tokens emitted together in one step (one target pass, or one "
              "streamed chunk for transformers) share that step's time evenly. TTFT and TPOT are medians over "
              "runs; tokens/s is total tokens over total time, prefill included; `decode` is the tokens after each "
              "run's first over the time after it (prefill excluded: what longer outputs approach), against the "
              "same fastest plain decoder. `c` is the draft's cost per drafted token relative "
              "to one plain target pass and `v` the cost of one of its verify passes; `predicted` is Leviathan et "
              "al.'s (1 - a^(k+1)) / ((1 - a)(k c + 1)) from the measured acceptance a, which assumes a verify pass "
              "costs one plain pass (a memory-bound target), and `as run` the same with the measured pass, "
              "(1 - a^(k+1)) / ((1 - a)(k c + v)): set both against the measured decode speedup.", ""]
    categories = sorted({r["category"] for r in records}, key=lambda c: (c != "all", c))
    for category in categories:
        lines += [f"## {'All prompts' if category == 'all' else 'Category: ' + category}", ""]
        lines += ["| method | backend | k | T | tok/s | vs fastest plain | decode vs fastest plain | speedup vs plain | vs hf | vs llamacpp | TTFT ms | "
                  "ITL p50/p90/p99 ms | TPOT ms | acceptance | mean accepted | per-position acceptance | c | v | predicted | as run | "
                  "draft/verify/other s | peak RSS GB | greedy = plain |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in records if r["category"] == category):
            itl = "/".join(_fmt(r[key], ".0f", 1000) for key in ("itl_p50_s", "itl_p90_s", "itl_p99_s"))
            pos = " ".join(f"{x:.2f}" for x in r["per_position_acceptance"]) or "-"
            split = "-" if r["draft_s"] is None else f"{r['draft_s']:.1f}/{r['verify_s']:.1f}/{r['other_s']:.1f}"
            same = "-"
            if "greedy_compared" in r:
                same = f"{r['greedy_compared'] - r['greedy_differs_from_plain']}/{r['greedy_compared']}"
            lines.append(
                f"| {r['method']} | {r['backend']} | {'-' if r['k'] is None else r['k']} | {r['temperature']:g} | "
                f"{r['tokens_per_s']:.2f} | {_fmt(r['speedup_vs_fastest_plain'], '.2f', suffix='x')} "
                f"({r['fastest_plain'] or '-'}) | {_fmt(r['decode_vs_fastest_plain'], '.2f', suffix='x')} | "
                f"{_fmt(r['speedup_vs_plain'], '.2f', suffix='x')} | "
                f"{_fmt(r['speedup_vs_hf'], '.2f', suffix='x')} | {_fmt(r['speedup_vs_llamacpp'], '.2f', suffix='x')} | "
                f"{_fmt(r['ttft_s'], '.0f', 1000)} | {itl} | "
                f"{_fmt(r['tpot_s'], '.0f', 1000)} | {_fmt(r['acceptance_rate'], '.1%')} | "
                f"{_fmt(r['mean_accepted_tokens'])} | {pos} | {_fmt(r['draft_cost_ratio'])} | "
                f"{_fmt(r['verify_cost_ratio'])} | {_fmt(r['predicted_speedup'], '.2f', suffix='x')} | "
                f"{_fmt(r['predicted_speedup_as_run'], '.2f', suffix='x')} | {split} | "
                f"{r['peak_rss_bytes'] / 1e9:.2f} | {same} |"
            )
        lines.append("")
    trees = [r for r in records if r.get("tree") and r["category"] == "all"]
    if trees:
        lines += ["## Trees", "", "Per tree pass: nodes the target scored, path tokens accepted (the emitted "
                  "token after them not counted), and the share of accepted nodes that were not their parent's "
                  "first candidate (what a chain would not have had). Passes that drafted a chain are not counted; "
                  "the last column is the share of drafting passes that scored a tree.",
                  "", "| method | k | T | tree passes | nodes/pass | accepted/pass | won by another candidate | tree share |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in trees:
            t = r["tree"]
            lines.append(f"| {r['method']} | {r['k']} | {r['temperature']:g} | {t['passes']} | "
                         f"{t['nodes_per_pass']:.1f} | {t['accepted_per_pass']:.2f} | {t['other_candidate_share']:.1%} | "
                         f"{t.get('tree_pass_share', 1.0):.0%} |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def write_plots(out_dir: Path, records: list[dict], runs: list[dict]) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plot extra is not installed: tables only
        return []
    paths = []
    temps = sorted({r["temperature"] for r in records})

    # Speedup vs k per category, one panel per temperature.
    k_records = [r for r in records if isinstance(r["k"], int) and r["speedup_vs_plain"] is not None]
    if k_records:
        categories = sorted({r["category"] for r in k_records}, key=lambda c: (c != "all", c))
        # Colour = category (black for all prompts), line style = method.
        colours = {c: ("black" if c == "all" else plt.cm.tab10(i % 10)) for i, c in enumerate(categories)}
        styles = {"draft": "-", "ngram": "--", "hf-pld": ":"}
        fig, axes = plt.subplots(1, len(temps), figsize=(6.5 * len(temps) + 2, 4.8), squeeze=False)
        for ax, t in zip(axes[0], temps):
            for method in sorted({r["method"] for r in k_records}):
                for category in categories:
                    pts = sorted((r["k"], r["speedup_vs_plain"]) for r in k_records
                                 if r["method"] == method and r["category"] == category and r["temperature"] == t)
                    if pts:
                        ax.plot(*zip(*pts), styles.get(method, "-."), marker="o", color=colours[category],
                                linewidth=2.5 if category == "all" else 1.2, label=f"{method} {category}")
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_xticks(sorted({r["k"] for r in k_records}))
            ax.set_xlabel("k (drafted tokens per pass)")
            ax.set_ylabel("speedup vs plain")
            ax.set_title(f"temperature {t:g}")
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        paths.append(_save(fig, out_dir / "speedup_vs_k.png"))

    # Acceptance per position (all prompts).
    pos = [r for r in records if r["category"] == "all" and r["per_position_acceptance"]]
    if pos:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for r in pos:
            ax.plot(range(1, len(r["per_position_acceptance"]) + 1), r["per_position_acceptance"], marker="o",
                    label=f"{r['method']} k={r['k']} T={r['temperature']:g}")
        ax.set_xlabel("draft position")
        ax.set_ylabel("fraction of passes accepting it")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
        paths.append(_save(fig, out_dir / "acceptance_per_position.png"))

    # ITL distribution per method (greedy if present).
    labels, data = [], []
    for key in sorted({(r["method"], r["k"], r["temperature"]) for r in runs}, key=str):
        itls = [x * 1000 for r in runs if (r["method"], r["k"], r["temperature"]) == key for x in r["itl_s"]]
        if itls:
            labels.append(f"{key[0]}{'' if key[1] is None else f' k={key[1]}'} T={key[2]:g}")
            data.append(itls)
    if data:
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(data)), 4.5))
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("inter-token latency per token (ms)")
        paths.append(_save(fig, out_dir / "itl_distribution.png"))

    # Tokens/s vs prompt length (a --prompt-lengths sweep).
    sweep = [r for r in records if r["category"].startswith("len") and r["category"][3:].isdigit()]
    if sweep:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for key in sorted({(r["method"], r["k"], r["temperature"]) for r in sweep}, key=str):
            pts = sorted((int(r["category"][3:]), r["tokens_per_s"]) for r in sweep
                         if (r["method"], r["k"], r["temperature"]) == key)
            ax.plot(*zip(*pts), marker="o", label=f"{key[0]}{'' if key[1] is None else f' k={key[1]}'} T={key[2]:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("tokens/s")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out_dir / "tokens_per_s_vs_prompt_length.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def write_endpoint_outputs(out_dir: Path, records: list[dict], raw: list[dict], config: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(records, indent=1) + "\n")
    with open(out_dir / "runs.jsonl", "w") as fh:
        for r in raw:
            fh.write(json.dumps(r) + "\n")
    lines = ["# specdecode endpoint load report", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in config.items()]
    lines += ["", "Inter-token latency is per token: a streamed chunk's gap is shared by the tokens in it (counted by "
              "tokenizing the chunk, scaled to the server's usage total).", "",
              "First and last quarter: the median tokens/s of one request among the first and the last quarter "
              "of the requests in the order they were sent (does the server speed up as it serves?).", "",
              "| concurrency | T | ok/requests | tok/s | req/s | TTFT ms | ITL p50/p90/p99 ms | TPOT ms | acceptance "
              "| first/last quarter tok/s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        itl = "/".join(_fmt(r[key], ".0f", 1000) for key in ("itl_p50_s", "itl_p90_s", "itl_p99_s"))
        order = "/".join(_fmt(r.get(key), ".2f") for key in ("first_quarter_tokens_per_s", "last_quarter_tokens_per_s"))
        lines.append(f"| {r['concurrency']} | {r['temperature']:g} | {r['requests'] - r['errors']}/{r['requests']} | "
                     f"{r['tokens_per_s']:.2f} | {r['request_throughput']:.2f} | {_fmt(r['ttft_s'], '.0f', 1000)} | "
                     f"{itl} | {_fmt(r['tpot_s'], '.0f', 1000)} | {_fmt(r['acceptance_rate'], '.1%')} | {order} |")
    plots = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
        for t in sorted({r["temperature"] for r in records}):
            rs = sorted((r for r in records if r["temperature"] == t), key=lambda r: r["concurrency"])
            xs = [r["concurrency"] for r in rs]
            a.plot(xs, [r["tokens_per_s"] for r in rs], marker="o", label=f"T={t:g}")
            for key, style in (("itl_p50_s", "-"), ("itl_p90_s", "--")):
                b.plot(xs, [(r[key] or 0) * 1000 for r in rs], style, marker="o", label=f"{key[4:7]} T={t:g}")
        a.set_xlabel("concurrency")
        a.set_ylabel("output tokens/s")
        b.set_xlabel("concurrency")
        b.set_ylabel("ITL per token (ms)")
        a.legend()
        b.legend()
        plots.append(_save(fig, out_dir / "throughput_itl_vs_concurrency.png"))
    except ImportError:
        pass
    lines += [""] + [f"![{p.stem}]({p.name})" for p in plots]
    (out_dir / "report.md").write_text("\n".join(lines) + "\n")
