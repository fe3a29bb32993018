"""What the choices made by measurement share: a cache file per machine and question, written
atomically (their timing rule is models/timing.py)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path


def cache_file(kind: str, parts: list, cache: Path | None = None) -> Path:
    """$SPECDECODE_CACHE/machine/<kind>-<digest>.json for this machine, its llama.cpp build (rebuilt
    with other kernels, e.g. AMX, it has other costs) and context settings, and these inputs."""
    from .backends import llamacpp
    from .backends.dtype_choice import machine_key
    from .registry import cache_dir

    build = [llamacpp.system_info(), {"flash_attn": llamacpp.FLASH_ATTN}] if llamacpp.available() else None
    key = json.dumps([machine_key(), build, *parts], sort_keys=True)
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
