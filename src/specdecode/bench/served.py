"""`specdecode serve` processes started for one bench run: each on a free loopback port, its log in
the run's folder, stopped (SIGTERM, then SIGKILL) when the run ends or fails.

A server the bench starts is loaded before it is measured (its /health answers), so loading time
never counts as latency, and all of them are up at once, so rounds can alternate between them."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from ..sampling.params import InvalidParameter

# Flags the bench owns: it picks the address, so a user's would point the bench at nothing.
OWNED_FLAGS = ("--host", "--port")


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_args(flags: str) -> list[str]:
    """The `specdecode serve` flags of one --serve value, refused when they name the address."""
    try:
        args = shlex.split(flags)
    except ValueError as exc:
        raise InvalidParameter(f"--serve {flags!r} is not a shell-quoted flag list: {exc}") from None
    owned = [a for a in args if a.split("=")[0] in OWNED_FLAGS]
    if owned:
        raise InvalidParameter(f"--serve {flags!r} sets {', '.join(owned)}: the bench picks each server's loopback "
                               "port itself; leave them out")
    return args


def log_tail(path: Path, lines: int = 8) -> str:
    text = path.read_text(errors="replace").strip().splitlines() if path.is_file() else []
    return "\n".join(text[-lines:]) or "(empty)"


def wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise InvalidParameter(f"the server `{shlex.join(proc.args[3:])}` exited (code {proc.returncode}) before "
                                   f"it answered /health; the end of {log}:\n{log_tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        time.sleep(0.5)
    raise InvalidParameter(f"the server `{shlex.join(proc.args[3:])}` did not answer /health within {timeout_s:.0f} s "
                           f"(loading its models?); raise --serve-timeout, or read {log}:\n{log_tail(log)}")


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def served(flag_sets: list[str], folder: Path, timeout_s: float = 900.0):
    """Start one `specdecode serve` per flag set and yield their base URLs once all are healthy."""
    commands = [serve_args(flags) for flags in flag_sets]
    folder.mkdir(parents=True, exist_ok=True)
    # Two servers are the paired bench's A and B; the logs carry the same names.
    logs = [folder / f"serve-{'AB'[i] if len(commands) == 2 else i}.log" for i in range(len(commands))]
    procs: list[subprocess.Popen] = []
    urls: list[str] = []
    try:
        for args, log in zip(commands, logs):
            port = free_port()
            with log.open("w") as handle:
                procs.append(subprocess.Popen([sys.executable, "-m", "specdecode", "serve", *args, "--host",
                                               "127.0.0.1", "--port", str(port)], stdout=handle,
                                              stderr=subprocess.STDOUT))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url, log in zip(procs, urls, logs):
            wait_healthy(proc, url, log, timeout_s)
        (folder / "servers.json").write_text(json.dumps(
            [{"url": url, "serve_flags": flags, "log": log.name} for url, flags, log in zip(urls, flag_sets, logs)],
            indent=1))
        yield urls
    finally:
        for proc in procs:
            stop(proc)
