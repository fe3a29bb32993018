"""A model spec, parsed once where it enters (a flag, a config, a choice) and passed down as fields.

    [BACKEND:]SOURCE[@QUANT][+vN]

BACKEND  hf | hf-static | hf-compile | hf-slots | llamacpp | onnx (none: chosen by the source)
SOURCE   default | a bundled name | a directory | a .gguf file | a Hugging Face id in the local cache
QUANT    llama.cpp: the GGUF requantised once by llama.cpp (q4_0, q8_0, ...);
         onnx: the export's precision (int4, the default; fp32, the runtime's exact mode)
+vN      drafts only: the vocabulary cut to a shortlist of N tokens (+v32k = 32,768)
"""

from __future__ import annotations

from dataclasses import dataclass

from .cache import ModelError

BACKENDS = ("hf", "hf-static", "hf-compile", "hf-slots", "llamacpp", "onnx")
# llama.cpp's file types for requantisation: a cheaper draft reads fewer bytes per token;
# acceptance tells whether it still agrees with the target.
ONNX_PRECISIONS = ("int4", "fp32")  # the onnx export: int4 weights (its fast path), or fp32 (its exact mode)
QUANTS = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


@dataclass(frozen=True)
class ModelSpec:
    text: str  # as written (reports and errors quote it)
    backend: str | None
    source: str
    quant: str | None = None
    shortlist: int | None = None

    @classmethod
    def parse(cls, spec: "str | ModelSpec") -> "ModelSpec":
        if isinstance(spec, ModelSpec):
            return spec
        text = spec.strip()
        backend, rest = None, text
        for name in BACKENDS:
            if text.startswith(name + ":"):
                backend, rest = name, text[len(name) + 1:]
                break
        rest, shortlist = split_shortlist(rest)
        quant = None
        if backend == "llamacpp":
            rest, quant = split_quant(rest)
        elif backend == "onnx":
            rest, quant = split_quant(rest, ONNX_PRECISIONS, "onnx precision")
        return cls(text, backend, rest, quant, shortlist)

    def for_role(self, role: str) -> "ModelSpec":
        """The spec, refused where its parts do not fit the role (a target keeps its full vocabulary)."""
        if self.shortlist is not None and role != "draft":
            raise ModelError(f"'{self.text}': a vocabulary shortlist is for drafts; the target keeps its full "
                             "vocabulary (its p must cover every token for the rejection step to be exact)")
        return self


def split_quant(name: str, known=QUANTS, what: str = "llama.cpp quantisation") -> tuple[str, str | None]:
    """'default@q4_0' -> ('default', 'q4_0'); a name without '@' has no requantisation."""
    base, sep, quant = name.rpartition("@")
    if not sep:
        return name, None
    quant = quant.lower()
    if quant not in known:
        raise ModelError(f"unknown {what} '{quant}': choose one of {', '.join(known)}")
    return base, quant


def split_shortlist(name: str) -> tuple[str, int | None]:
    """'default@q4_0+v32k' -> ('default@q4_0', 32768); no '+v' suffix, no shortlist."""
    base, sep, size = name.rpartition("+v")
    if not sep or not base:
        return name, None
    return base, parse_size(size)


def parse_size(text: str) -> int:
    """'32768' or '32k' -> 32768; refused unless a whole number > 0."""
    raw = text.strip().lower()
    try:
        n = int(raw[:-1]) * 1024 if raw.endswith("k") else int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise ModelError(f"a draft vocabulary shortlist is a number of tokens (e.g. +v32k or +v32768), got '{text}'")
    return n
