"""`specdecode report`: the speed checks of saved bench runs (bench/speed_checks.py)."""

from __future__ import annotations

import json

import typer

from . import app


@app.command()
def report(
    folders: list[str] = typer.Argument(..., help="the --out folders of `specdecode bench` runs"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object per folder"),
):
    """Per temperature: every method against the fastest plain decoder of the same run (all prompts,
    code, the rest; pooled, and the median per prompt, which one stalled request hardly moves), its
    worst category, and k=auto against the best fixed k of each proposer. Markdown, as
    docs/performance.md cites it."""
    from ..bench.speed_checks import load_runs, markdown, speed_checks

    for folder in folders:
        checks = speed_checks(load_runs(folder))
        print(json.dumps({"folder": folder, "checks": checks}) if as_json else markdown(checks, folder))
