"""The real CLI in-process, as a user runs it: argv in, exit status checked, output back."""

import json
import sys

from specdecode import cli


def run_cli(capsys, monkeypatch, *args: str, code: int = 0):
    """`specdecode ARGS` with the exit status `code`: its stdout as JSON when it printed some, else
    {"stderr": what it said} (a refusal's one line)."""
    monkeypatch.setattr(sys, "argv", ["specdecode", *args])
    try:
        cli.main()
    except SystemExit as exc:
        assert (exc.code or 0) == code, capsys.readouterr().err
    else:
        assert code == 0, "expected a non-zero exit"
    captured = capsys.readouterr()
    try:
        return json.loads(captured.out)
    except ValueError:
        return {"stdout": captured.out, "stderr": captured.err}
