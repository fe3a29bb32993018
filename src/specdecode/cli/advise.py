"""The commands that advise: `specdecode tune` (proposal length from measured costs) and `plan`
(memory and bandwidth of a deployment)."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from ..sampling.params import InvalidParameter, SamplingParams
from . import (Device, DType, Draft, DraftContext, DraftDType, Target, app, check_draft_context, err, out, parse_list,
               refuse_unused)
from .render import print_plan


@app.command()
def plan(
    target: Optional[str] = typer.Option(None, "--target", help="model spec whose config gives the shape"),
    params: Optional[float] = typer.Option(None, "--params", help="target parameters, e.g. 70e9"),
    layers: Optional[int] = typer.Option(None, "--layers"),
    hidden: Optional[int] = typer.Option(None, "--hidden"),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads"),
    head_dim: Optional[int] = typer.Option(None, "--head-dim"),
    vocab: Optional[int] = typer.Option(None, "--vocab"),
    draft: Optional[str] = typer.Option(None, "--draft", help="draft model spec"),
    draft_params: Optional[float] = typer.Option(None, "--draft-params", help="draft parameters, e.g. 1e9"),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16 | fp16 | fp8 | int8 | int4 | fp32"),
    draft_dtype: Optional[str] = typer.Option(None, "--draft-dtype"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16 | fp8"),
    gpu: str = typer.Option("h100-80gb", "--gpu", help="a100-40gb, a100-80gb, h100-80gb, h200-141gb, l40s, b200, cpu"),
    num_gpus: int = typer.Option(0, "--num-gpus", help="devices for tensor parallelism (0 = the minimum that fits)"),
    context: int = typer.Option(4096, "--context", help="tokens per sequence (prompt + output)"),
    concurrency: int = typer.Option(1, "--concurrency", help="sequences decoding together"),
    acceptance: str = typer.Option("0.7", "--acceptance", help="a number in [0, 1], or a results.json from bench"),
    proposer: str = typer.Option("draft", "--proposer", help="draft | ngram | suffix (for --emit and results.json)"),
    k: str = typer.Option("1,2,3,4,5,6,8", "--k", help="k values to compare"),
    bandwidth: Optional[float] = typer.Option(None, "--bandwidth", help="GB/s, overrides the device table"),
    peak_tflops: Optional[float] = typer.Option(None, "--peak-tflops", help="overrides the device table"),
    memory_gb: Optional[float] = typer.Option(None, "--memory-gb", help="overrides the device table"),
    overhead_ms: Optional[float] = typer.Option(None, "--overhead-ms-per-layer",
                                                help="dispatch cost per layer per pass (eager CPU: measure it)"),
    measure: bool = typer.Option(False, "--measure", help="with --gpu cpu: measure bandwidth and per-layer "
                                                          "overhead on this machine"),
    emit: Optional[str] = typer.Option(None, "--emit", help="vllm | sglang: print the serve command"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Plan memory, sharding and the speculative speedup for a deployment (a model, not a measurement)."""
    import dataclasses

    from ..advise import handoff, machine
    from ..advise import plan as planner

    name = planner.ALIASES.get(gpu.lower(), gpu.lower())
    if name not in planner.DEVICES:
        raise InvalidParameter(f"unknown --gpu {gpu!r}: choose one of {', '.join(planner.DEVICES)}")
    for flag, value in (("--dtype", dtype), ("--draft-dtype", draft_dtype), ("--kv-dtype", kv_dtype)):
        if value is not None and value not in planner.WEIGHT_BYTES:
            raise InvalidParameter(f"{flag} must be one of {', '.join(planner.WEIGHT_BYTES)}, got {value!r}")
    for flag, value in (("--context", context), ("--concurrency", concurrency)):
        if value < 1:
            raise InvalidParameter(f"{flag} must be >= 1, got {value}")
    if num_gpus < 0:
        raise InvalidParameter(f"--num-gpus must be >= 0, got {num_gpus}")
    device = planner.DEVICES[name]
    if measure:
        if name != "cpu":
            raise InvalidParameter("--measure measures this machine: use it with --gpu cpu")
        bandwidth = bandwidth or machine.measure_bandwidth_gbs(dtype)
        peak_tflops = peak_tflops or machine.measure_matmul_tflops()
        overhead_ms = overhead_ms if overhead_ms is not None else machine.measure_layer_overhead_ms(dtype)
        import psutil

        memory_gb = memory_gb or psutil.virtual_memory().total / 1e9
        err.print(f"measured: {bandwidth:.1f} GB/s effective {dtype} weight streaming, {peak_tflops:.3f} TFLOPS fp32 matmul, "
                  f"{overhead_ms:.2f} ms per layer per pass",
                  highlight=False)
    overrides = {"bandwidth_gbs": bandwidth, "bf16_tflops": peak_tflops, "memory_gb": memory_gb,
                 "per_layer_overhead_ms": overhead_ms}
    device = dataclasses.replace(device, **{key: v for key, v in overrides.items() if v is not None})
    if any(v is not None and v <= 0 for key, v in overrides.items() if key != "per_layer_overhead_ms"):
        raise InvalidParameter("--bandwidth, --peak-tflops and --memory-gb must be > 0")

    target_shape = _plan_shape(target, params, "target", layers=layers, hidden=hidden, kv_heads=kv_heads,
                               head_dim=head_dim, vocab=vocab)
    draft_shape = _plan_shape(draft, draft_params, "draft") if (draft or draft_params) and \
        proposer not in ("ngram", "suffix") else None
    accept = _plan_acceptance(acceptance, proposer)
    if proposer not in ("draft", "ngram", "suffix"):
        raise InvalidParameter(f"--proposer is draft, ngram or suffix, got {proposer!r}")
    inp = planner.PlanInput(target_shape, draft_shape, dtype, draft_dtype, kv_dtype, device, max(num_gpus, 1),
                            context, concurrency, accept, parse_list(k, int, "--k"), proposer=proposer)
    result = planner.plan(inp)
    if num_gpus == 0 and result["min_tensor_parallel"] and result["min_tensor_parallel"] > 1:
        inp.num_gpus = result["min_tensor_parallel"]
        result = planner.plan(inp)
    if emit:
        if emit not in ("vllm", "sglang"):
            raise InvalidParameter(f"--emit is vllm or sglang, got {emit!r}")
        best_k = result["recommended_k"] or 4
        make = handoff.vllm_command if emit == "vllm" else handoff.sglang_command
        print(make(target or f"<target {params:g} params>", draft or "<draft>", proposer, best_k, result["num_gpus"]))
        return
    if as_json:
        print(json.dumps(result))
        return
    print_plan(result)


def _plan_shape(spec, params, role, **overrides):
    from ..advise import plan as planner

    if spec:
        from transformers import AutoConfig

        from ..models.registry import resolve

        resolved = resolve(spec, role)
        return planner.shape_from_config(AutoConfig.from_pretrained(str(resolved.path)), spec)
    if params is None:
        raise InvalidParameter(f"give the {role} as --{'target' if role == 'target' else 'draft'} SPEC or "
                               f"--{'params' if role == 'target' else 'draft-params'} N")
    if params <= 0:
        raise InvalidParameter(f"{role} parameters must be > 0, got {params}")
    return planner.shape_from_params(params, **overrides)


def _plan_acceptance(value: str, proposer: str) -> float:
    from pathlib import Path

    try:
        a = float(value)
    except ValueError:
        path = Path(value)
        if not path.is_file():
            raise InvalidParameter(f"--acceptance is a number in [0, 1] or a results.json file, got {value!r}") from None
        records = [r for r in json.loads(path.read_text()) if r.get("method") == proposer and r.get("category") == "all"
                   and r.get("acceptance_rate") is not None]
        if not records:
            raise InvalidParameter(f"{path} has no '{proposer}' records with an acceptance rate") from None
        best = max(records, key=lambda r: r["tokens_per_s"])
        return float(best["acceptance_rate"])
    if not 0 <= a <= 1:
        raise InvalidParameter(f"--acceptance must be in [0, 1], got {a}")
    return a


# The options only one of tune's modes reads (parameter names): the measurements here, or a running server.
TUNE_LOCAL_ONLY = ("target", "draft", "proposer", "k", "dtype", "draft_dtype", "device", "draft_context", "measure",
                   "save")
TUNE_ENDPOINT_ONLY = ("cost_curve", "draft_cost", "concurrency", "requests", "window")


@app.command()
def tune(
    ctx: typer.Context,
    workload: str = typer.Option("spec-bench", "--workload"),
    categories: Optional[str] = typer.Option(None, "--categories"),
    limit: int = typer.Option(6, "--limit", help="prompts used for the measurements"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = typer.Option("draft,ngram", "--proposer", help="proposers to consider: draft, ngram, suffix, "
                                 "hybrid, hybrid-suffix"),
    k: str = typer.Option("1,2,3,4,6,8", "--k", help="candidate k values"),
    temperature: float = typer.Option(0.0, "--temperature"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
    draft_context: int = DraftContext,
    measure: str = typer.Option("best", "--measure", help="best (plain + the recommendation) | all | none"),
    save: Optional[str] = typer.Option(None, "--save", help="write the choice to this config file"),
    as_json: bool = typer.Option(False, "--json"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="recommend k for a running server from its "
                                           "own speculative counters (/metrics) instead (docs/endpoints.md)"),
    cost_curve: Optional[str] = typer.Option(None, "--cost-curve", help="with --endpoint: the server's verify "
                                             "cost by tokens per pass (a `tune --json` output, or "
                                             '{"verify_s": {...}, "draft_token_s": s})'),
    draft_cost: Optional[float] = typer.Option(None, "--draft-cost", help="with --endpoint: a draft step as a "
                                               "fraction of a one-token target pass (c)"),
    concurrency: str = typer.Option("1", "--concurrency", help="with --endpoint: concurrency levels to drive "
                                    "and price, e.g. 1,4,8"),
    requests: int = typer.Option(16, "--requests", help="with --endpoint: workload requests per level"),
    window: Optional[float] = typer.Option(None, "--window", help="with --endpoint: read the counters over this "
                                           "many seconds of the server's own traffic instead of a workload"),
):
    """Measure costs and acceptance, predict tokens/s for each (proposer, k), and recommend one; or
    (--endpoint) recommend k for a running server from its own acceptance."""
    from pathlib import Path

    if endpoint:
        from .endpoints import tune_endpoint

        refuse_unused(ctx, TUNE_LOCAL_ONLY, "with --endpoint (the server runs its own models and proposer): "
                      "drop {them}")

        return tune_endpoint(endpoint, workload, categories, limit, max_new_tokens, temperature, cost_curve,
                             draft_cost, parse_list(concurrency, int, "--concurrency"), requests, window, as_json)

    refuse_unused(ctx, TUNE_ENDPOINT_ONLY, "without --endpoint: add --endpoint URL to tune a running server, or "
                  "drop {them}")
    from rich.progress import Progress

    from ..advise import tune as tuner
    from ..bench.workloads import load_workload
    from ..proposers import PROPOSERS, WITH_DRAFT

    names = parse_list(proposer, str, "--proposer")
    if any(n not in PROPOSERS or n == "none" for n in names):
        raise InvalidParameter(f"--proposer takes {', '.join(p for p in PROPOSERS if p != 'none')}, got "
                               f"{proposer!r}")
    k_values = parse_list(k, int, "--k")
    if any(x < 1 for x in k_values):
        raise InvalidParameter("--k values must be >= 1")
    if measure not in ("best", "all", "none"):
        raise InvalidParameter(f"--measure is best, all or none, got {measure!r}")
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=0)
    prompts = load_workload(workload, parse_list(categories, str, "--categories") if categories else None, limit)
    needs_draft = any(n in WITH_DRAFT for n in names)
    window = check_draft_context(draft_context)
    gen = load_for_tune(target, draft if needs_draft else None, dtype, draft_dtype, window, device)
    ids = [gen.encode(p.turns[0]) for p in prompts]
    gen.generate(ids[0], SamplingParams(max_new_tokens=4), k=2, chat=False, proposer="none")  # warm-up
    k_max = max(k_values)
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("measuring verify and draft costs", total=None)
        median_prompt = sorted(ids, key=len)[len(ids) // 2]
        costs = tuner.measure_costs(gen, median_prompt, max_width=k_max + 1)
        progress.update(task, description=f"acceptance of {', '.join(names)} at k={k_max}",
                        total=len(ids) * len(names), completed=0)
        runs = tuner.measure_acceptance(gen, ids, names, k_max, params, progress=lambda: progress.advance(task))
        accs = {n: tuner.acceptance_from(r, n, k_max) for n, r in runs.items()}
        predictions = tuner.candidates(costs, accs, k_values)
        best = tuner.recommend(predictions)
        # The same costs with each category's own acceptance: what to pick if the traffic is that kind.
        per_category = {}
        for cat in sorted({p.category for p in prompts}):
            rows = [i for i, p in enumerate(prompts) if p.category == cat]
            cat_accs = {n: tuner.acceptance_from([runs[n][i] for i in rows], n, k_max) for n in names}
            preds = tuner.candidates(costs, cat_accs, k_values)
            pick = tuner.recommend(preds)
            per_category[cat] = {"proposer": pick.proposer, "k": pick.k,
                                 "predicted_tokens_per_s": pick.predicted_tokens_per_s,
                                 "table": [tuner.as_dict(p) for p in preds]}
        to_measure = [] if measure == "none" else predictions if measure == "all" else [best]
        plain = None
        if measure != "none":
            progress.update(task, description="measuring plain decoding", total=len(ids), completed=0)
            plain = tuner.measured_tokens_per_s(gen, ids, "none", 0, params, progress=lambda: progress.advance(task))
        for pred in to_measure:
            progress.update(task, description=f"measuring {pred.proposer} k={pred.k}", total=len(ids), completed=0)
            pred.measured_tokens_per_s = tuner.measured_tokens_per_s(gen, ids, pred.proposer, pred.k, params,
                                                                     progress=lambda: progress.advance(task))
    uses_draft = best.proposer in WITH_DRAFT
    choice = {"proposer": best.proposer, "k": best.k, "target": target, "draft": draft if uses_draft else None,
              "dtype": gen.info.get("dtype"), "draft_dtype": gen.info.get("draft_dtype"),
              "draft_context": window if uses_draft else None}
    result = {**choice, "predicted_tokens_per_s": best.predicted_tokens_per_s,
              "measured_tokens_per_s": best.measured_tokens_per_s, "plain_tokens_per_s": plain,
              "verify_cost_s": costs.verify_s, "draft_token_s": costs.draft_token_s, "lookup_s": costs.lookup_s,
              "suffix_lookup_s": costs.suffix_lookup_s,
              "acceptance": {n: a.accepted_at for n, a in accs.items()},
              "table": [tuner.as_dict(p) for p in predictions], "per_category": per_category,
              # The acceptance runs themselves (per prompt), so that the predictions can be redone.
              "acceptance_runs": {n: [{"id": p.id, "category": p.category, **tuner.run_summary(s)}
                                      for p, s in zip(prompts, r)] for n, r in runs.items()}}
    if save:
        tuner.save_config(Path(save), choice)
    if as_json:
        print(json.dumps(result))
        return
    table = Table("proposer", "k", "tokens/pass", "pass ms (draft+verify+other)", "predicted tok/s", "measured tok/s",
                  "error")
    for p in predictions:
        c = p.costs
        err_pct = "-" if p.measured_tokens_per_s is None else \
            f"{(p.predicted_tokens_per_s / p.measured_tokens_per_s - 1):+.0%}"
        table.add_row(p.proposer, str(p.k), f"{p.expected_tokens_per_pass:.2f}",
                      f"{p.pass_s * 1000:.0f} ({c['draft_s'] * 1000:.0f}+{c['verify_s'] * 1000:.0f}+"
                      f"{c['other_s'] * 1000:.0f})", f"{p.predicted_tokens_per_s:.2f}",
                      "-" if p.measured_tokens_per_s is None else f"{p.measured_tokens_per_s:.2f}", err_pct)
    out.print(table)
    widths = " ".join(f"{w}:{t * 1000:.0f}" for w, t in sorted(costs.verify_s.items()))
    out.print(f"verify cost by tokens scored (ms): {widths}; draft {costs.draft_token_s * 1000:.0f} ms/token",
              highlight=False)
    if plain:
        out.print(f"plain decoding: {plain:.2f} tok/s", highlight=False)
    for cat, pick in per_category.items():
        out.print(f"  {cat}: --proposer {pick['proposer']} --k {pick['k']} (predicted "
                  f"{pick['predicted_tokens_per_s']:.2f} tok/s)", highlight=False)
    out.print(f"recommended: --proposer {best.proposer} --k {best.k} (predicted {best.predicted_tokens_per_s:.2f} "
              "tok/s)" + (f"; saved to {save}" if save else ""), highlight=False)


def load_for_tune(target, draft, dtype, draft_dtype, draft_context=None, device="auto"):
    from ..models.generator import SpeculativeGenerator

    return SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer="draft" if draft else "none",
                                               dtype=dtype, draft_dtype=draft_dtype, draft_context=draft_context,
                                               device=device)
