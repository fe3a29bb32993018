"""`specdecode profile`: where a speculative pass's time goes on this machine."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from . import (Device, DType, Draft, DraftDType, Proposer, Target, app, check_draft_context, DraftContext, out,
               parse_k, sampling_from_flags)


@app.command()
def profile(
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
