"""The commands' endpoint modes, for servers already running: `verify --endpoint`
(checks/endpoint.py), `bench --endpoint` once (a load test, bench/endpoint.py) or twice (paired,
bench/paired.py), `tune --endpoint` (advise/endpoint_tune.py). What they run lives in those modules;
this file maps flags and prints."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import typer
from rich.table import Table

from ..sampling.params import InvalidParameter
from . import err, out, parse_list


OUTCOMES = ("tokens", "text")


def sampling_body(prompt: str, length: int, temperature: float, top_k: int, top_p: float, min_p: float,
                  presence_penalty: float, frequency_penalty: float, json_schema: str | None,
                  outcome: str = "tokens") -> dict:
    """The completions request both sides get (fields a server would otherwise ignore are never sent
    at their defaults, so a server that lacks one is not refused for nothing). outcome "tokens" asks
    for logprobs, whose tokens are the sample; "text" does not, and the sample is the completion's
    text: a function of its tokens, so two equal token distributions give equal text ones and the
    test stays valid (with cells merged where two token sequences spell one text), for servers whose
    logprobs are missing or slow (llama-cpp-python's server computes them in Python; docs/endpoints.md)."""
    if outcome not in OUTCOMES:
        raise InvalidParameter(f"--outcome takes {' or '.join(OUTCOMES)}, got {outcome!r}")
    body: dict = {"prompt": prompt, "max_tokens": length, "temperature": temperature}
    if outcome == "tokens":
        body["logprobs"] = 1
    if top_k > 0:
        body["top_k"] = top_k
    if top_p < 1.0:
        body["top_p"] = top_p
    if min_p > 0:
        body["min_p"] = min_p
    if presence_penalty:
        body["presence_penalty"] = presence_penalty
    if frequency_penalty:
        body["frequency_penalty"] = frequency_penalty
    if json_schema:
        try:
            schema = json.loads(Path(json_schema).read_text())
        except (OSError, ValueError) as exc:
            raise InvalidParameter(f"--json-schema {json_schema}: not a readable JSON file ({exc})") from None
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "check", "schema": schema}}
    return body


def verify_endpoint(prompt: str, endpoint: str, baseline: str | None, model: str | None, baseline_model: str | None,
                    samples: int, length: int, body: dict, seed: int | None, alpha: float, concurrency: int,
                    detect_tv: float | None, plot: str | None, as_json: bool) -> None:
    from ..checks import endpoint as check

    if samples < 10:
        raise InvalidParameter(f"--samples must be at least 10, got {samples}")
    if concurrency < 1:
        raise InvalidParameter(f"--concurrency must be >= 1, got {concurrency}")
    if body["temperature"] <= 0:
        raise InvalidParameter("verify compares distributions: use --temperature > 0 (greedy has one outcome)")
    tested, plain = check.sides(endpoint, baseline, model, baseline_model)
    if seed is not None:
        for side in (tested, plain):
            check.check_seeds(side, body, seed, length)
    exact, exact_why = check.first_token_exact(plain, body)
    err.print(f"sampling {samples} x {length} tokens from each of {tested.base} ({tested.model}) and {plain.label} "
              f"{plain.base}, {concurrency} at a time", highlight=False)
    a, b = asyncio.run(check.sample_both(tested, plain, body, samples, length, concurrency, seed))
    report = {"prompt": prompt, "endpoint": tested.base, "baseline": plain.base, "baseline_extra": plain.extra,
              "model": tested.model, "baseline_model": plain.model, "length": length, "request": body,
              "seed": seed, "first_token_exact_source": exact_why, **check.judge(a, b, exact, alpha)}
    if detect_tv is not None and report["detects_tv"] > detect_tv:
        need = check.samples_for(detect_tv, report["cells"], alpha)
        raise InvalidParameter(f"{samples} samples per side over {report['cells']} cells detect a TV difference of "
                               f"{report['detects_tv']:.3f}, not {detect_tv}: use --samples {need} or more")
    if plot:
        plot_distributions(a, b, Path(plot), report)
    if as_json:
        print(json.dumps(report))
    else:
        print_endpoint_report(report, a, b)
    if not report["passed"]:
        raise typer.Exit(1)


def print_endpoint_report(report: dict, a: list, b: list) -> None:
    out.print(f"{report['endpoint']} ({report['model']}) against {report['baseline']} {report['baseline_extra'] or ''}"
              f": {report['samples']} samples of {report['length']} tokens each; {report['distinct_outcomes']} "
              f"distinct outcomes; alpha {report['alpha']}", highlight=False, markup=False)
    table = Table("test", "cells", "statistic", "p-value", "result")
    table.add_row("joint, chi-square (homogeneity)", str(report["cells"]), f"{report['chi2']:.1f}",
                  f"{report['p_value']:.3g}", "pass" if report["p_value"] >= report["alpha"] else "FAIL")
    table.add_row("joint, total variation", str(report["cells"]),
                  f"TV {report['tv_distance']:.3f} (fails above {report['tv_fail_above']:.3f})", "-",
                  "pass" if report["tv_distance"] <= report["tv_fail_above"] else "FAIL")
    first = report.get("first_token_exact")
    if first is not None:
        table.add_row("first token vs the baseline's exact p", str(first["cells"]), f"{first['chi2']:.1f}",
                      f"{first['p_value']:.3g}", "pass" if first["passed"] else "FAIL")
    out.print(table)
    if first is None:
        out.print(f"first-token exact test skipped: {report['first_token_exact_source']}", highlight=False)
    out.print(f"power: this run detects a total-variation difference of {report['detects_tv']:.3f} or more with "
              f"probability >= {1 - report['alpha']:g}", highlight=False)
    top = Counter(b).most_common(3)
    out.print("most frequent baseline outcomes: " + ", ".join(f"{''.join(o)!r} {c}" for o, c in top),
              highlight=False, markup=False)
    out.print("PASSED: the endpoint's output follows the baseline's distribution" if report["passed"] else
              "FAILED: the endpoint's output does not follow the baseline's distribution")


def plot_distributions(a: list, b: list, path: Path, report: dict) -> None:
    """The two empirical distributions over the most frequent outcomes, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ca, cb = Counter(a), Counter(b)
    keys = [k for k, _ in (ca + cb).most_common(20)]
    xs = range(len(keys))
    fig, ax = plt.subplots(figsize=(max(6, len(keys) * 0.5), 4))
    ax.bar([x - 0.2 for x in xs], [ca[k] / len(a) for k in keys], 0.4, label="endpoint")
    ax.bar([x + 0.2 for x in xs], [cb[k] / len(b) for k in keys], 0.4, label="baseline")
    ax.set_xticks(list(xs), [ascii("".join(k))[:14] for k in keys], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("fraction of samples")
    ax.set_title(f"{report['samples']} samples each; p = {report['p_value']:.3g}, TV = {report['tv_distance']:.3f}")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def tune_endpoint(endpoint: str, workload: str, categories: str | None, limit: int, max_new_tokens: int,
                  temperature: float, cost_curve: str | None, draft_cost: float | None, levels: list[int],
                  requests: int, window: float | None, as_json: bool) -> None:
    """Per concurrency level: drive the workload (or wait out a window), read the counters' change,
    price every k with the cost curve, print the best k and the engine's flag for it."""
    import time

    import httpx

    from ..advise import endpoint_tune as tuning
    from ..bench.endpoint import run_level
    from ..bench.workloads import load_workload
    from ..checks.endpoint import base_url, pick_model, served_models

    if cost_curve is None and draft_cost is None:
        raise InvalidParameter("tune --endpoint prices k with the server's verify cost: give --cost-curve FILE (from "
                               "`specdecode tune --json` or a measured curve) or --draft-cost C")
    if any(c < 1 for c in levels) or requests < 1:
        raise InvalidParameter("--concurrency levels and --requests must be >= 1")
    verify, draft_s = tuning.load_cost_curve(Path(cost_curve)) if cost_curve else ({1: 1.0}, None)
    if draft_cost is not None:
        if not 0 <= draft_cost <= 10:
            raise InvalidParameter(f"--draft-cost is a fraction of a one-token pass, e.g. 0.3; got {draft_cost}")
        draft_s = draft_cost * verify[1]
    draft_s = draft_s or 0.0
    base = base_url(endpoint)
    model = pick_model(base, served_models(base), None)

    def counters() -> "tuning.Counters":
        try:
            return tuning.parse_metrics(httpx.get(f"{base}/metrics", timeout=10).text)
        except httpx.HTTPError as exc:
            raise tuning.TuneError(f"cannot read {base}/metrics ({type(exc).__name__}): start the server with its "
                                   "metrics on (vLLM and ours always; llama-server --metrics)") from None

    prompts = [p.turns[0] for p in load_workload(workload, parse_list(categories, str, "--categories")
                                                 if categories else None, limit)]
    before = counters()
    if before.drafts == 0 and not before.per_pos and before.engine is None:
        raise tuning.TuneError(f"{base}/metrics has no speculative counters (spec_decode_num_drafts, ...): this "
                               "server does not report its acceptance")
    rows = []
    for level in ([levels[0]] if window else levels):
        start = counters()
        if window:
            time.sleep(window)
        else:
            # As chat turns, the way `tune` itself reads the workload (under the model's chat template).
            asyncio.run(run_level(base, model, prompts, level, requests, None, max_new_tokens, temperature, None,
                                  True, 600.0, 0))
        acc = tuning.acceptance(counters() - start)
        picks = tuning.recommend(acc, verify, draft_s, levels if window else [level])
        for pick in picks:
            rows.append({**pick, "acceptance": acc.accepted_at, "acceptance_model": acc.model,
                         "server_k": acc.server_k, "passes": acc.passes})
    engine, version = before.engine, tuning.version_of(base)
    for row in rows:
        row["flag"] = tuning.flag(engine, version, row["k"])
    # Without a measured curve every width is priced as one token's pass (what a GPU server under
    # light load is close to; a CPU server's widths cost more): the report says which it used.
    verify_curve = "measured (--cost-curve)" if cost_curve else "assumed flat: every width costs a one-token pass"
    report = {"endpoint": base, "model": model, "engine": engine, "version": version, "levels": rows,
              "verify_s": verify, "verify_curve": verify_curve, "draft_token_s": draft_s}
    if as_json:
        print(json.dumps(report))
        return
    out.print(f"{base} ({model}; engine {engine or 'unknown'}{' ' + version if version else ''})", highlight=False)
    table = Table("concurrency", "server k", "acceptance A_1..A_K", "best k", "predicted speedup", "flag")
    for row in rows:
        table.add_row(str(row["concurrency"]), f"{row['server_k']:.1f}",
                      " ".join(f"{a:.2f}" for a in row["acceptance"]) + f" ({row['acceptance_model']})",
                      str(row["k"]), f"{row['speedup']:.2f}x", row["flag"])
    out.print(table)
    out.print("k above the server's own cannot be priced: its counters say nothing past it", highlight=False)
    if not cost_curve:
        out.print(f"verify cost {verify_curve} (--draft-cost alone); on a CPU, or a GPU near its compute limit, "
                  "give --cost-curve FILE with the server's measured widths", highlight=False)


def bench_endpoint(endpoint, workload, categories, limit, concurrency, requests, request_rate, max_new_tokens,
                   temperature, model, api, tokenizer_spec, seed, out_dir, ignore_eos=False, system=None) -> None:
    from pathlib import Path

    from ..bench.endpoint import run_endpoint_bench
    from ..bench.report import write_endpoint_outputs
    from ..bench.workloads import load_workload

    levels = parse_list(concurrency, int, "--concurrency")
    if any(c < 1 for c in levels):
        raise InvalidParameter("--concurrency values must be >= 1")
    if requests < 1:
        raise InvalidParameter("--requests must be >= 1")
    if request_rate is not None and request_rate <= 0:
        raise InvalidParameter("--request-rate must be > 0")
    if api not in ("chat", "completions"):
        raise InvalidParameter(f"--api is chat or completions, got {api!r}")
    if not endpoint.startswith(("http://", "https://")):
        raise InvalidParameter(f"--endpoint must be an http(s) URL, got {endpoint!r}")
    temps = parse_list(temperature, float, "--temperature")
    prompts = [p.turns[0] for p in load_workload(workload, parse_list(categories, str, "--categories")
                                                 if categories else None, limit)]
    tokenizer = None
    if tokenizer_spec:
        from transformers import AutoTokenizer

        from ..models.registry import resolve

        tokenizer = AutoTokenizer.from_pretrained(str(resolve(tokenizer_spec, "tokenizer").path))
    records, raw = [], []
    for t in temps:
        r, w = run_endpoint_bench(endpoint, prompts, levels, requests, request_rate, max_new_tokens, t, tokenizer,
                                  api == "chat", model, seed=seed, extra_body={"ignore_eos": True} if ignore_eos else None,
                                  progress=lambda c: err.print(f"concurrency {c} done", highlight=False),
                                  system=system)
        records += r
        raw += w
    write_endpoint_outputs(Path(out_dir), records, raw, {"endpoint": endpoint, "concurrency": levels,
                                                         "requests_per_level": requests, "request_rate": request_rate,
                                                         "max_new_tokens": max_new_tokens, "api": api,
                                                         "ignore_eos": ignore_eos, "system_prompt": system,
                                                         "prompts": len(prompts)})
    table = Table("concurrency", "T", "ok/requests", "tok/s", "req/s", "TTFT ms", "ITL p50/p90/p99 ms", "TPOT ms",
                  "acceptance", "first/last quarter tok/s")
    for r in records:
        ms = lambda v: "-" if v is None else f"{v * 1000:.0f}"  # noqa: E731
        table.add_row(str(r["concurrency"]), f"{r['temperature']:g}", f"{r['requests'] - r['errors']}/{r['requests']}",
                      f"{r['tokens_per_s']:.2f}", f"{r['request_throughput']:.2f}", ms(r["ttft_s"]),
                      f"{ms(r['itl_p50_s'])}/{ms(r['itl_p90_s'])}/{ms(r['itl_p99_s'])}", ms(r["tpot_s"]),
                      "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}",
                      "/".join("-" if r[key] is None else f"{r[key]:.2f}"
                               for key in ("first_quarter_tokens_per_s", "last_quarter_tokens_per_s")))
    out.print(table)
    out.print(f"wrote {out_dir}/results.json, {out_dir}/report.md and plots")


def bench_paired(endpoints, workload, categories, limit, concurrency, max_new_tokens, temperature, model, api, seed,
                 out_dir, ignore_eos=False, system=None) -> None:
    """Two servers on the same prompts, ABBA per level: each metric as A relative to B with an interval."""
    import json
    from pathlib import Path

    from ..bench.paired import paired_level
    from ..bench.workloads import load_workload
    from ..checks.endpoint import base_url, pick_model, served_models

    levels = parse_list(concurrency, int, "--concurrency")
    if any(c < 1 for c in levels):
        raise InvalidParameter("--concurrency values must be >= 1")
    if api not in ("chat", "completions"):
        raise InvalidParameter(f"--api is chat or completions, got {api!r}")
    sides = {}
    for label, url in zip("AB", endpoints):
        base = base_url(url)
        sides[label] = (base, pick_model(base, served_models(base), model))
    prompts = [p.turns[0] for p in load_workload(workload, parse_list(categories, str, "--categories")
                                                 if categories else None, limit)]
    if len(prompts) < 2:
        raise InvalidParameter("a paired bench needs at least 2 prompts (intervals are over prompts): raise --limit")
    levels_out = []
    for t in parse_list(temperature, float, "--temperature"):
        for c in levels:
            levels_out.append(paired_level(sides, prompts, c, max_new_tokens, t, api == "chat",
                                           {"ignore_eos": True} if ignore_eos else None, seed, system))
            err.print(f"T={t:g} concurrency {c} done", highlight=False)
    report = {"A": {"endpoint": sides["A"][0], "model": sides["A"][1]},
              "B": {"endpoint": sides["B"][0], "model": sides["B"][1]}, "max_new_tokens": max_new_tokens,
              "api": api, "ignore_eos": ignore_eos, "system_prompt": system, "prompts": len(prompts),
              "levels": levels_out}
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "paired.json").write_text(json.dumps(report, indent=1))
    table = Table("T", "concurrency", "prompts", "tok/s per request A/B", "TPOT B/A", "TTFT B/A", "aggregate tok/s A/B")
    for lv in levels_out:
        cell = lambda key: "-" if key not in lv["ratios"] else (  # noqa: E731
            f"{lv['ratios'][key]['ratio']:.3f} [{lv['ratios'][key]['ci_low']:.3f}, {lv['ratios'][key]['ci_high']:.3f}]")
        table.add_row(f"{lv['temperature']:g}", str(lv["concurrency"]), str(lv["prompts"]), cell("tokens_per_s"),
                      cell("tpot_s"), cell("ttft_s"), f"{lv['throughput_ratio']:.3f}")
    out.print(f"A = {sides['A'][0]} ({sides['A'][1]}), B = {sides['B'][0]} ({sides['B'][1]}); above 1: A is "
                      "better; 95% intervals over prompts", highlight=False)
    out.print(table)
    out.print(f"wrote {folder / 'paired.json'}", highlight=False)
