"""`specdecode bench`: in-process methods side by side, or a running server (--endpoint)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..engine.request import check_tree
from ..proposers import DEFAULT_PROPOSER
from ..sampling.params import InvalidParameter, SamplingParams
from .bench_inputs import read_system_prompt, schema_grammar
from . import (Device, DType, Draft, DraftDType, SuffixTokens, Target, app, check_draft_context,
               check_suffix_tokens, err, from_config, out, parse_k, parse_list, refuse_unused)


# Our default configuration beside the plain decoders a CPU user would otherwise run: a speedup is
# read against the fastest of them, not only against our own plain decoding.
DEFAULT_METHODS = f"plain,{DEFAULT_PROPOSER},ngram,llamacpp,llama-server"


# The options only one of bench's modes reads (parameter names): in process, or a server under load.
IN_PROCESS_ONLY = ("turns", "prompt_lengths", "methods", "k", "repeats", "target", "draft", "dtype", "draft_dtype",
                   "device", "draft_context", "suffix_cache_tokens", "config", "verifier", "tree", "json_schema",
                   "sampler")
SERVER_ONLY = ("requests", "request_rate", "model", "api", "tokenizer_spec", "serve_timeout")


@app.command()
def bench(
    ctx: typer.Context,
    workload: str = typer.Option("spec-bench", "--workload", help="spec-bench, code (24 Python function prompts), repetitive (40 JSON extractions into one schema, 4 code-edit conversations), or a JSONL file in Spec-Bench's format; several joined by commas"),
    categories: Optional[str] = typer.Option(None, "--categories", help="comma-separated (e.g. coding,qa,mt_bench)"),
    limit: Optional[int] = typer.Option(None, "--limit", help="prompts in all, an equal number per category"),
    turns: str = typer.Option("first", "--turns", help="first | all (a conversation, each turn measured)"),
    prompt_lengths: Optional[str] = typer.Option(None, "--prompt-lengths",
                                                 help="synthetic sweep, e.g. 128,512,2048 (replaces --workload)"),
    methods: str = typer.Option(DEFAULT_METHODS, "--methods",
                                help="plain,draft,ngram,suffix,hybrid,hybrid-suffix,hf,hf-assisted,hf-pld,"
                                "llamacpp,llamacpp-pld,llama-server,llama-server-ngram,llama-server-draft,"
                                "plain-torch,llamacpp-shipped; the default compares our default ("
                                f"{DEFAULT_PROPOSER} k=auto) and the n-gram proposer with our plain decoding and "
                                "llama.cpp's own plain loops (llama-cpp-python; llama-server once `make llama-server` built it)"),
    k: str = typer.Option("auto", "--k", help="comma-separated k values, may include auto (the default's)"),
    temperature: str = typer.Option("0", "--temperature", help="comma-separated, e.g. 0,1"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    repeats: int = typer.Option(1, "--repeats"),
    seed: int = typer.Option(0, "--seed"),
    concurrency: str = typer.Option("1", "--concurrency", help="offline bench runs one request at a time"),
    target: str = Target,
    draft: str = Draft,
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
    draft_context: str = typer.Option("0", "--draft-context", help="the draft model sees only the last N prompt "
                                      "tokens (0: all); several (e.g. 0,128) compare the windows in one run, the "
                                      "later ones as <method>-ctxN"),
    suffix_cache_tokens: int = SuffixTokens,
    out_dir: str = typer.Option("bench-out", "--out", help="directory for results.json, report.md and plots"),
    config: Optional[str] = typer.Option(None, "--config", help="a `tune --save` file: its models and dtypes are "
                                                                "used and its k joins the grid"),
    endpoint: Optional[list[str]] = typer.Option(None, "--endpoint", help="load-test an OpenAI-compatible server at "
                                                 "URL; given twice, the two servers paired on the same prompts "
                                                 "(ABBA rounds per concurrency level, ratios with intervals)"),
    system_prompt_file: Optional[str] = typer.Option(None, "--system-prompt-file", help="a text file sent as the "
                                                     "system message before every prompt (a chat app's shared "
                                                     "instructions; what a prefix cache saves)"),
    serve: Optional[list[str]] = typer.Option(None, "--serve", help="start `specdecode serve` with these flags (one "
                                              "quoted string, e.g. \"--proposer none\") on a free port, wait until "
                                              "it is loaded, bench it as --endpoint does, and stop it; given twice, "
                                              "the two are paired"),
    serve_timeout: float = typer.Option(900.0, "--serve-timeout", help="with --serve: seconds a server may take to "
                                        "load before the run is refused"),
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
    verifier: str = typer.Option("token", "--verifier", help="token, block, or both (token,block): our methods under "
                                 "each verification rule, side by side (block ones named METHOD-block)"),
    tree: str = typer.Option("0", "--tree", help="node budgets of tree drafting, e.g. 16 or 8,16: each runs beside "
                             "our methods' chains as METHOD-treeN (0: chains only)"),
    json_schema: Optional[str] = typer.Option(None, "--json-schema", help="a JSON schema file every output of our "
                                              "methods must match (structured output, with and without "
                                              "speculation); peers cannot be constrained, so they are refused"),
    sampler: str = typer.Option("standard", "--sampler", help="standard, invariant, or both (standard,invariant): "
                                "our methods under each sampling rule, side by side (invariant ones named "
                                "METHOD-invariant)"),
):
    """Benchmark plain decoding, our proposers and transformers' peers side by side, or (--endpoint)
    a running OpenAI-compatible server under load."""
    if serve and endpoint:
        raise InvalidParameter("--serve starts the servers to bench and --endpoint names running ones: give one of "
                               "them")
    system = read_system_prompt(system_prompt_file)
    if serve or endpoint:
        refuse_unused(ctx, IN_PROCESS_ONLY, "on a running server (it runs its own models, proposer and k): "
                      "drop {them}, or set them in the server's own flags")
        if endpoint:
            refuse_unused(ctx, ("serve_timeout",), "with --endpoint (the server is running "
                          "already): drop {them}")
        if system and api != "chat":
            raise InvalidParameter("--system-prompt-file needs --api chat: a completions prompt has no roles")
        servers = serve or endpoint
        if len(servers) > 2:
            flag = "--serve" if serve else "--endpoint"
            raise InvalidParameter(f"{flag} takes one server (a load test) or two (paired), got {len(servers)}")
        running = functools.partial(bench_running, workload=workload, categories=categories, limit=limit,
                                    concurrency=concurrency, requests=requests, request_rate=request_rate,
                                    max_new_tokens=max_new_tokens, temperature=temperature, model=model, api=api,
                                    tokenizer_spec=tokenizer_spec, seed=seed, out_dir=out_dir, ignore_eos=ignore_eos,
                                    system=system)
        if endpoint:
            return running(endpoint)
        from ..bench.served import served

        with served(serve, Path(out_dir), serve_timeout) as urls:
            return running(urls)
    refuse_unused(ctx, SERVER_ONLY, "in the in-process bench: add --endpoint URL or --serve FLAGS to load-test a "
                  "server, or drop {them}")
    import json

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    from ..models.backends.hf import parse_dtype
    from ..bench.draft_windows import window_variants
    from ..bench.methods import ALL_METHODS, EngineMethod, make_method
    from ..bench.report import environment, write_outputs
    from ..bench.runner import BenchConfig, Grid, aggregate, complete_groups, run_grid
    from ..bench.workloads import length_sweep, load_workload
    from ..models.device import resolve_device
    from ..models.draft_choice import AUTO
    from ..models.generator import (build_generator, choose_target, draft_measurements, load_models, seed_costs,
                                    seed_draft_prior)
    from ..models.loader import backend_name, load_draft, torch_model
    from ..proposers import WITH_DRAFT

    windows = [check_draft_context(n) for n in parse_list(draft_context, int, "--draft-context")]
    if len(set(windows)) < len(windows):
        raise InvalidParameter(f"--draft-context lists a window twice: {draft_context!r}")
    if config:  # the saved models and dtypes replace the flags; the saved k joins the compared ones
        target, draft, _, dtype, draft_dtype, saved_k, windows[0] = from_config(
            config, target, draft, "none", dtype, draft_dtype, k, windows[0])
        if saved_k not in k.split(","):
            k = f"{k},{saved_k}"
    method_names = parse_list(methods, str, "--methods")
    unknown = [m for m in method_names if m not in ALL_METHODS]
    if unknown:
        raise InvalidParameter(f"unknown methods {unknown}: choose from {', '.join(ALL_METHODS)}")
    k_values = [parse_k(x) for x in parse_list(k, str, "--k")]
    if any(x != "auto" and x < 1 for x in k_values):
        raise InvalidParameter("--k values must be >= 1 or auto")
    temps = parse_list(temperature, float, "--temperature")
    trees = parse_list(tree, int, "--tree")
    for budget in trees:
        check_tree(budget)
    if len(set(trees)) < len(trees):
        raise InvalidParameter(f"--tree lists a node budget twice: {tree!r}")
    verifiers = parse_list(verifier, str, "--verifier")
    if any(v not in ("token", "block") for v in verifiers) or len(set(verifiers)) < len(verifiers):
        raise InvalidParameter(f"--verifier takes token and/or block, got {verifier!r}")
    samplers = parse_list(sampler, str, "--sampler")
    if any(s not in ("standard", "invariant") for s in samplers) or len(set(samplers)) < len(samplers):
        raise InvalidParameter(f"--sampler takes standard and/or invariant, got {sampler!r}")
    if parse_list(concurrency, int, "--concurrency") != [1]:
        raise InvalidParameter("the offline bench runs one request at a time (--concurrency 1); for load at "
                               "higher concurrency, drive a server with --endpoint URL")
    if turns not in ("first", "all"):
        raise InvalidParameter(f"--turns is first or all, got {turns!r}")
    if repeats < 1:
        raise InvalidParameter("--repeats must be >= 1")
    for t in temps:
        SamplingParams(temperature=t)  # validates
    window = windows[0]
    grammar = schema_grammar(json_schema, method_names)
    config = BenchConfig(k_values, temps, max_new_tokens, repeats, seed, turns, ignore_eos=ignore_eos, system=system)
    SamplingParams(max_new_tokens=max_new_tokens)
    if prompt_lengths is None:
        prompts = load_workload(workload, parse_list(categories, str, "--categories") if categories else None, limit)

    needs_draft = any(m in (*WITH_DRAFT, "hf-assisted") for m in method_names)
    resolved_dtype, resolved_draft = parse_dtype(dtype), parse_dtype(draft_dtype or dtype)
    # Several drafts (e.g. hf:default,llamacpp:default) are compared in one run: the first is
    # `draft` (and hf-assisted's assistant), the others are methods named draft-<backend>.
    drafts = [d.strip() for d in (draft or "").split(",") if d.strip()] if needs_draft else []
    target_found = None
    resolved_device = resolve_device(device)
    if target.strip() == AUTO:  # resolved once, so the draft choice and the report name the runtime
        target_found = choose_target(resolved_dtype, resolved_device)
        target = target_found["choice"]
    target_model, tokenizer, draft_model, draft_tok = load_models(target, drafts[0] if drafts else None,
                                                                  resolved_dtype, resolved_draft, device=resolved_device)
    if prompt_lengths is not None:
        prompts = length_sweep(tokenizer, parse_list(prompt_lengths, int, "--prompt-lengths"))
    # k=auto starts from what the choices measured here, as a generator loaded with "auto" does
    # (models/generator.load_generator); the choices are cached, so this reads them.
    draft_found = draft_measurements(target, target_model, tokenizer, drafts[0] if draft_model is not None else None,
                                     resolved_dtype, resolved_draft, resolved_device)

    def generator(draft_window):
        """A generator over the loaded target and first draft, its draft seeing `draft_window`."""
        built = build_generator(target_model, tokenizer, "draft" if draft_model is not None else "none", draft_model,
                                draft_tok, draft_context=draft_window,
                                suffix_memory=check_suffix_tokens(suffix_cache_tokens))
        seed_costs(built.pass_costs, target_found, draft_found)
        seed_draft_prior(built, draft_found)
        return built

    gen = generator(window)
    too_long = [(p.id, p.category, n) for p in prompts
                if (n := len(gen.encode(p.turns[0]))) + max_new_tokens > gen.target.max_context]
    if too_long:
        raise InvalidParameter(
            f"{len(too_long)} prompts do not fit the target's context of {gen.target.max_context} tokens with "
            f"--max-new-tokens {max_new_tokens} (e.g. prompt {too_long[0][0]} in {too_long[0][1]}: {too_long[0][2]} "
            "tokens); choose other --categories or fewer --max-new-tokens")
    others = [(spec, *load_draft(spec, resolved_draft, target_model, tokenizer, device=resolved_device))
              for spec in drafts[1:]] \
        if needs_draft else []
    # hf-assisted needs a transformers assistant: the first draft in the list that is one.
    assistant = next((m for m in [draft_model, *(o[1] for o in others)] if torch_model(m) is not None), None)
    if assistant is None and "hf-assisted" in method_names and torch_model(target_model) is not None:
        # No draft listed is a transformers model (e.g. only llama.cpp drafts): the peer gets the
        # default pair's torch draft, so that it still runs beside ours.
        assistant = load_draft("default", resolved_draft, target_model, tokenizer, device=resolved_device)[0]
    grid = Grid([])
    for name in method_names:
        try:
            grid.methods.append(make_method(name, gen, target, target_model, tokenizer, draft_model, assistant,
                                               resolved_dtype))
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
    if draft_model is not None:
        for extra in windows[1:]:
            grid.methods += window_variants(method_names, extra, generator)
    grid.skip_methods_without_points(k_values)
    if grammar is not None:
        gen.grammars().check(grammar)
    for method in [m for m in grid.methods if isinstance(m, EngineMethod)]:
        method.sampler, method.verifier, method.grammar = samplers[0], verifiers[0], grammar
        # Plain decoding drafts nothing for a verifier to judge: it runs once per sampler only.
        variants = [(s, verifiers[0], s) for s in samplers[1:]] + \
            [(samplers[0], v, v) for v in verifiers[1:] if method.proposer_method != "plain"]
        for other_sampler, other_verifier, suffix in variants:
            grid.methods.append(EngineMethod(method.proposer_method, method.gen, label=f"{method.name}-{suffix}",
                                             sampler=other_sampler, verifier=other_verifier))
            grid.methods[-1].grammar = grammar
        if method.proposer_method == "plain":
            continue
        # Each tree budget beside the method's chain, walked with the token rule (block judges one chain).
        for budget in (b for b in trees if b):
            grid.methods.append(EngineMethod(method.proposer_method, method.gen, label=f"{method.name}-tree{budget}",
                                             sampler=samplers[0], tree=budget))
            grid.methods[-1].grammar = grammar
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
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    interrupted = False
    with open(Path(out_dir) / "runs.jsonl", "w") as log, Progress(*columns, console=err) as progress:
        task = progress.add_task("bench", total=total)

        def keep(run: dict) -> None:
            log.write(json.dumps(run) + "\n")
            log.flush()

        try:
            run_grid(grid, prompts, tokenizer, config,
                     progress=lambda label: progress.update(task, advance=1, description=label), runs=runs, on_run=keep)
        except KeyboardInterrupt:
            # Stopped by hand: report the runs that finished (every method of a prompt runs before
            # the next prompt, so the ratios compare like with like up to the last prompt).
            interrupted = True
            runs[:] = complete_groups(runs, len(grid.points(k_values)))
            err.print(f"interrupted: reporting the {len(runs)} of {total} runs whose prompt every method finished")
    records = aggregate(runs)
    env = environment(resolved_dtype, resolved_draft, target, draft)
    env["device"] = resolved_device
    if target_found is not None:
        env["target_choice"] = {"choice": target_found["choice"], "why": target_found["why"]}
    if draft_model is not None and drafts[0] == AUTO:  # draft_found is auto's choice
        env["draft_choice"] = {"choice": draft_found["choice"], "why": draft_found["why"]}
    cfg = {"workload": prompt_lengths and f"prompt lengths {prompt_lengths}" or workload, "categories": categories,
           "limit": limit, "turns": turns, "methods": method_names, "k": k_values, "temperature": temps, "tree": trees,
           "max_new_tokens": max_new_tokens, "repeats": repeats, "seed": seed, "concurrency": 1,
           "prompts": len(prompts), "draft_context": windows if len(windows) > 1 else window, "json_schema": json_schema, "system_prompt": system,
           "runs_finished": len(runs), "runs_planned": total, "interrupted": interrupted}
    write_outputs(Path(out_dir), records, runs, env, cfg, grid.skipped)
    table = Table("method", "k", "T", "tok/s", "speedup", "decode", "acceptance", "mean acc.", "TTFT ms", "ITL p50 ms")
    for r in records:
        if r["category"] != "all":
            continue
        table.add_row(r["method"], "-" if r["k"] is None else str(r["k"]), f"{r['temperature']:g}",
                      f"{r['tokens_per_s']:.2f}", "-" if r["speedup_vs_plain"] is None else f"{r['speedup_vs_plain']:.2f}x",
                      "-" if r["decode_vs_fastest_plain"] is None else f"{r['decode_vs_fastest_plain']:.2f}x",
                      "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}",
                      "-" if r["mean_accepted_tokens"] is None else f"{r['mean_accepted_tokens']:.2f}",
                      "-" if r["ttft_s"] is None else f"{r['ttft_s'] * 1000:.0f}",
                      "-" if r["itl_p50_s"] is None else f"{r['itl_p50_s'] * 1000:.0f}")
    out.print(table)
    out.print(f"wrote {out_dir}/results.json, {out_dir}/report.md and plots")


def bench_running(urls: list[str], *, workload, categories, limit, concurrency, requests, request_rate, max_new_tokens,
                  temperature, model, api, tokenizer_spec, seed, out_dir, ignore_eos, system) -> None:
    """Running servers: one load-tested, or two paired on the same prompts."""
    from .endpoints import bench_endpoint, bench_paired

    if len(urls) == 2:
        return bench_paired(urls, workload, categories, limit, concurrency, max_new_tokens, temperature, model, api,
                            seed, out_dir, ignore_eos, system)
    return bench_endpoint(urls[0], workload, categories, limit, concurrency, requests, request_rate, max_new_tokens,
                          temperature, model, api, tokenizer_spec, seed, out_dir, ignore_eos, system)
