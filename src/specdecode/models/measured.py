"""What the choices made by measurement share: a cache file per machine and question, written
atomically, and the timing rule (alternating rounds, the median) that puts a shared machine's drift
on every candidate alike."""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def cache_file(kind: str, parts: list, cache: Path | None = None) -> Path:
    """$SPECDECODE_CACHE/machine/<kind>-<digest>.json for this machine and these inputs."""
    from .backends.dtype_choice import machine_key
    from .registry import cache_dir

    key = json.dumps([machine_key(), *parts], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (cache or cache_dir() / "machine") / f"{kind}-{digest}.json"


def read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write(path: Path, found: dict) -> None:
    """Write-then-rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{time.time_ns()}.tmp")
    tmp.write_text(json.dumps(found, indent=1) + "\n")
    tmp.replace(path)


def cached(kind: str, cache: Path | None = None) -> list[dict]:
    """Every <kind> choice measured on this machine so far (for `specdecode models`)."""
    from .registry import cache_dir

    folder = cache or cache_dir() / "machine"
    return [found for path in sorted(folder.glob(f"{kind}-*.json")) if (found := read(path)) is not None]


def alternating_medians(tasks: dict[str, Callable[[], None]], rounds: int, repeats: int = 1) -> dict[str, float]:
    """Seconds per call of each task: `rounds` rounds, each calling every task `repeats` times in
    turn, and the median per task."""
    times: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(rounds):
        for name, task in tasks.items():
            for _ in range(repeats):
                start = time.perf_counter()
                task()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}
