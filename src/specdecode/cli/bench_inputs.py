"""`bench`'s file inputs: the system prompt and the JSON schema, read with errors that say how to fix them."""

from __future__ import annotations

from pathlib import Path

from ..sampling.params import InvalidParameter


def read_system_prompt(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameter(f"--system-prompt-file {path!r} cannot be read as UTF-8 text: {exc}") from None
    if not text:
        raise InvalidParameter(f"--system-prompt-file {path!r} is empty: give a file with the system message")
    return text


def schema_grammar(path: str | None, methods: list[str]):
    """The GrammarSpec of --json-schema (None without it); only our methods can honour it."""
    if path is None:
        return None
    import json

    from ..bench.methods import ENGINE_METHODS
    from ..sampling.constraints import GrammarSpec

    peers = [m for m in methods if m not in ENGINE_METHODS]
    if peers:
        raise InvalidParameter(f"--json-schema constrains our methods only; {', '.join(peers)} would run "
                               "unconstrained: drop them from --methods")
    try:
        return GrammarSpec("json", json.loads(Path(path).read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidParameter(f"--json-schema {path}: {exc}") from None
