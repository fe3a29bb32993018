"""`specdecode profile`: where a speculative pass's time goes on this machine (the engine's stages),
and its subcommands for the costs the choices rest on: `curve` (a target pass by width, per runtime),
`draft-cost` (a draft token per runtime and shortlist, with its predicted speedup) and `threads` (how
a torch target and a llama.cpp draft share the cores)."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from ..sampling.params import InvalidParameter
from . import (Device, DType, Draft, DraftDType, Proposer, Target, app, check_draft_context, DraftContext, err, out,
               parse_k, parse_list, sampling_from_flags)


profile_app = typer.Typer(no_args_is_help=False, help="Where a pass's time goes on this machine: the engine's "
                          "stages (no subcommand), a target pass by width (curve), a draft token (draft-cost), "
                          "thread arrangements (threads), the check a lent GPU runs (device).")
app.add_typer(profile_app, name="profile")


@profile_app.callback(invoke_without_command=True)
def profile(
    ctx: typer.Context,
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("auto", "--k", help="tokens drafted per target pass, or auto"),
    workload: str = typer.Option("code", "--workload", help="a bench workload (spec-bench, code, repetitive, a JSONL file)"),
    categories: Optional[str] = typer.Option(None, "--categories", help="comma-separated"),
    limit: int = typer.Option(3, "--limit", help="prompts profiled"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    seed: Optional[int] = typer.Option(0, "--seed"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
    draft_context: int = DraftContext,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """Time each stage of the engine's step (plan, propose, score, verify, learn, other) over a few
    prompts: ms per pass and per emitted token, read from the engine's own per-step records."""
    if ctx.invoked_subcommand is not None:
        return
    from ..bench.profile import STAGES, stage_profile
    from ..bench.workloads import load_workload
    from ..models.generator import SpeculativeGenerator

    steps = parse_k(k)
    prompts = [p.turns[0] for p in load_workload(workload, categories.split(",") if categories else None, limit)]
    params = sampling_from_flags(max_new_tokens, temperature, 0, 1.0, 0.0, seed, ignore_eos=True)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=check_draft_context(draft_context),
                                               device=device)
    report = stage_profile(gen, prompts, params, steps, proposer)
    if as_json:
        print(json.dumps(report, indent=1))
        return
    m = report["machine"]
    table = Table(title=f"{report['proposer']} k={report['k']}, {report['prompts']} prompts, {report['passes']} passes, "
                        f"{report['tokens_per_pass']:.2f} tokens/pass, {report['decode_tokens_per_s']:.1f} tok/s decode")
    for column in ("stage", "ms/pass", "ms/token", "share"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    total = sum(report["ms_per_pass"].values()) or 1.0
    for stage in STAGES:
        ms = report["ms_per_pass"].get(stage, 0.0)
        table.add_row(stage, f"{ms:.2f}", f"{report['ms_per_token'].get(stage, 0.0):.2f}", f"{ms / total:.0%}")
    out.print(table)
    out.print(f"target {report['target']}, draft {report['draft']}; machine: {m['cpu']}, {m['cores']} cores, "
              f"{' '.join(m['flags'])}")


def print_json_or(report: dict, as_json: bool, table: Table) -> None:
    if as_json:
        print(json.dumps(report, indent=1))
        return
    out.print(table)
    m = report["machine"]
    out.print(f"machine: {m['cpu']}, {m['cores']} cores, {' '.join(m['flags'])}")


@profile_app.command("curve")
def curve(
    specs: Optional[list[str]] = typer.Argument(None, help="target runtimes (default: the default target on every "
                                                "runtime installed here, as --target auto compares them)"),
    widths: str = typer.Option("1,2,3,4,5,6,8,12,16", "--widths", help="tokens per pass, comma-separated"),
    rounds: int = typer.Option(5, "--rounds", help="alternating rounds (the median is reported)"),
    context: int = typer.Option(200, "--context", help="tokens of context before each pass"),
    dtype: str = DType,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """A target pass of w tokens by width (and a two-branch tree where the runtime scores trees), per
    runtime, in alternating rounds: the curve the cost model prices a proposal of k drafts by."""
    from ..bench.curves import verify_curves
    from ..models.backends import llamacpp
    from ..models.target_choice import candidates

    sizes = parse_list(widths, int, "--widths")
    if min(sizes) < 1 or rounds < 1 or context < 1:
        raise InvalidParameter("--widths, --rounds and --context take whole numbers >= 1")
    report = verify_curves(specs or candidates(llamacpp.available()), sizes, rounds, context, dtype)
    table = Table(title=f"ms per target pass after {context} tokens (median of {rounds} alternating rounds)")
    table.add_column("width", justify="right")
    curves = report["curves"]
    for spec, found in curves.items():
        table.add_column(spec, justify="right")
        if found["tree_ms"]:
            table.add_column(f"{spec} (tree)", justify="right")
    for w in sizes:
        cells = []
        for found in curves.values():
            cells.append(f"{found['chain_ms'][str(w)]:.1f}")
            if found["tree_ms"]:
                cells.append(f"{found['tree_ms'][str(w)]:.1f}" if str(w) in found["tree_ms"] else "-")
        table.add_row(str(w), *cells)
    print_json_or(report, as_json, table)
    if not as_json:
        out.print("prefill: " + ", ".join(f"{spec} {found['prefill_tokens_per_s']:.0f} tok/s"
                                          for spec, found in curves.items()))
    if not as_json and any(spec.startswith("llamacpp:") or spec.endswith(".gguf") for spec in report["curves"]):
        out.print(f"llama.cpp build: {llamacpp.system_info()}")


@profile_app.command("draft-cost")
def draft_cost(
    drafts: Optional[list[str]] = typer.Argument(None, help="draft runtimes (default: every default-draft candidate "
                                                 "installed here, as --draft auto compares them)"),
    target: str = typer.Option("default", "--target", help="the target the drafts are priced against"),
    dtype: str = DType,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """A one-token draft step per draft runtime and shortlist, its agreement with the target on the
    calibration text, and the speedup the cost model predicts from both (--draft auto's measurement,
    not cached)."""
    from ..bench.curves import draft_costs
    from ..models import draft_choice
    from ..models.backends import llamacpp

    report = draft_costs(target, drafts or draft_choice.candidates(llamacpp.available()), dtype)
    table = Table(title=f"draft cost beside {target} (plain one-token pass {report['verify_ms']['1']:.1f} ms)")
    for column in ("draft", "ms/token", "c", "greedy acc.", "T=1 acc.", "k", "predicted greedy", "k T=1",
                   "predicted T=1"):
        table.add_column(column, justify="left" if column == "draft" else "right")
    for name, row in report["table"].items():
        table.add_row(name, f"{row['draft_ms']:.2f}", f"{row['c']:.3f}", f"{row['greedy']:.0%}", f"{row['sampled']:.0%}",
                      str(row["k_greedy"]), f"{row['speedup_greedy']:.2f}x", str(row["k_t1"]), f"{row['speedup_t1']:.2f}x")
    print_json_or(report, as_json, table)
    if not as_json:
        out.print(f"best here: {report['choice']}: {report['why']}")


@profile_app.command("threads")
def threads(
    target: str = typer.Option("default", "--target", help="the target (a torch one shares the cores with OpenMP)"),
    draft: str = typer.Option("llamacpp:default@q4_0+v32k", "--draft"),
    dtype: str = DType,
    rounds: int = typer.Option(3, "--rounds"),
    tokens: int = typer.Option(48, "--max-new-tokens"),
    arrangements: Optional[str] = typer.Option(None, "--arrangements", help="comma-separated (default: all): "
                                               "default, passive, llamacpp-1-thread, torch-1-thread"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
):
    """The same greedy generation under each thread arrangement, each in a fresh process, taking turns
    round by round: median decode tokens/s and draft / verify ms per pass."""
    from ..bench.threads import thread_arrangements

    if rounds < 1 or tokens < 1:
        raise InvalidParameter("--rounds and --max-new-tokens take whole numbers >= 1")
    names = parse_list(arrangements, str, "--arrangements") if arrangements else None
    report = thread_arrangements(target, draft, dtype, rounds, tokens, names)
    table = Table(title=f"{target} with draft {draft}, {rounds} rounds")
    for column in ("arrangement", "decode tok/s", "draft ms/pass", "verify ms/pass"):
        table.add_column(column, justify="left" if column == "arrangement" else "right")
    for name, row in report["summary"].items():
        table.add_row(name, f"{row['decode_tokens_per_s']:.2f}", f"{row['draft_ms_per_pass']:.1f}",
                      f"{row['verify_ms_per_pass']:.1f}")
    print_json_or(report, as_json, table)


@profile_app.command("device")
def device_check(
    out_dir: Optional[str] = typer.Argument(None, help="a folder for gpu_check.json and gpu_check.md"),
    small: bool = typer.Option(False, "--small", help="tiny shapes: rehearse the whole check on a CPU"),
    budget_s: float = typer.Option(420.0, "--budget-s", help="seconds after which the remaining steps are skipped "
                                   "(what was measured is kept)"),
    acceptance: Optional[str] = typer.Option(None, "--acceptance", help="a `specdecode bench` results.json of the "
                                             "real default pair's draft proposer (per-position acceptance), to "
                                             "model speedups from the measured costs"),
    render: Optional[str] = typer.Option(None, "--render", help="print the tables of a gpu_check.json instead"),
):
    """The device check a lent GPU runs (docs/gpu.md): real-shaped random-weight pairs' one-token steps
    and verify curves per runner against the bandwidth roofline, c, modelled speedups, and `verify` on
    tiny models on the device (the rule passes, the naive residual fails)."""
    import sys
    from pathlib import Path

    from ..bench import device_report

    if render:
        path = Path(render)
        if not path.is_file():
            raise InvalidParameter(f"--render {render!r}: no such file (give a gpu_check.json)")
        typer.echo(device_report.render(json.loads(path.read_text())), nl=False)  # unwrapped: a markdown file
        return
    if out_dir is None:
        raise InvalidParameter("give OUT (a folder for gpu_check.json) or --render FILE")
    if acceptance and not Path(acceptance).is_file():
        raise InvalidParameter(f"--acceptance {acceptance!r}: no such file (give a bench results.json)")
    from ..bench.device_check import run

    result = run(Path(out_dir), small, budget_s, Path(acceptance) if acceptance else None, " ".join(sys.argv),
                 progress=lambda line: err.print(line, markup=False, highlight=False))
    failed = [row["check"] for row in result["checks"] if not row["passed"]]
    out.print(f"checks failed: {', '.join(failed)}" if failed else "all checks passed", highlight=False)
    if failed:
        raise typer.Exit(1)
