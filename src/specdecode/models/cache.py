"""The cache of weights and measurements (SPECDECODE_CACHE, default ~/.cache/specdecode), the lock
that serialises work on it across processes, and the error every model problem is reported as."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from rich.console import Console

# Where work on models (fetching, converting, measuring) reports its progress: stderr.
console = Console(stderr=True)


class ModelError(RuntimeError):
    """A model cannot be found, assembled, verified or paired; the message says how to fix it."""


def cache_dir() -> Path:
    root = os.environ.get("SPECDECODE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specdecode"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(name: str):
    """Serialise assembly/conversion across processes (parallel test workers, a server and a CLI)."""
    lock_path = cache_dir() / f".{name}.lock"
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
