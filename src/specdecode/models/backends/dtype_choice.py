"""`--dtype auto` on a CPU: the dtype that runs a model's linear layers fastest on this machine,
measured once (a few seconds) and cached per machine.

auto only picks how a checkpoint is computed (bf16 or float32), never a quantisation of it: `w8a8`
(w8a8.py) is timed too and reported (`specdecode models`), but it changes a target's model and a
draft's acceptance, so it is the user's call (docs/backends.md measures both). `int8` (one
activation scale per pass) is not offered: a long pass such as a prefill loses most of its
precision to the largest activation in it (docs/backends.md).

Why measure instead of reading the CPU flags: the flags do not say how PyTorch's kernels behave
(whether bf16's matmul cost grows with the rows, how close to the memory's speed it reads weights,
whether AMX is there and enabled); machines seen so far differ on each (docs/backends.md). A timing
tells them apart.

The timing is of what a decoding step is made of: a stack of distinct projections of a 1.5B model's
MLP shape, too large together for the last-level cache (so weights stream from memory as in a real
pass), at the widths a step uses: 1 token (plain decoding, drafting) and 5 (a verify pass).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

import torch

from ..timing import alternating_medians

CANDIDATES = ("bfloat16", "float32", "w8a8")  # timed
AUTO = ("bfloat16", "float32")  # chosen from
WIDTHS = (1, 5)
SHAPE = (8960, 1536)  # Qwen2.5-1.5B's MLP up/gate projection
LAYERS = 6  # 82 MB of bf16 weights: beyond a 32 MB L3
ROUNDS = 5
FLAGS_OF_NOTE = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "asimd", "sve")


def cpu_description() -> dict:
    """The CPU as a benchmark must name it: model, cores, and the instruction-set flags that decide
    which kernels run (AVX-512 BF16, AMX, VNNI)."""
    model, flags = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model is None:
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu": model or platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "flags": [f for f in FLAGS_OF_NOTE if f in flags]}


def machine_key() -> str:
    """What the measurement depends on: the CPU, its cores and flags, torch's version and threads."""
    desc = cpu_description()
    text = json.dumps([desc, torch.__version__, torch.get_num_threads()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stack(dtype: str) -> list:
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        lin = torch.nn.Linear(SHAPE[1], SHAPE[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(SHAPE, generator=gen) * 0.02)
        if dtype == "w8a8":
            from .w8a8 import W8A8Linear

            layers.append(W8A8Linear(lin))
        else:
            layers.append(lin.to(getattr(torch, dtype)))
    return layers


def measure() -> dict:
    """Milliseconds for one pass through the stack, per dtype and width: medians of alternating
    rounds, so that the machine's drift falls on every candidate alike."""
    stacks = {d: _stack(d) for d in CANDIDATES}
    inputs = {(d, w): torch.randn(w, SHAPE[1]).to(torch.bfloat16 if d == "bfloat16" else torch.float32)
              for d in CANDIDATES for w in WIDTHS}

    def through(d: str, w: int):
        def run():
            for layer in stacks[d]:
                layer(inputs[d, w])
        return run

    with torch.inference_mode():  # the first round warms every kernel up
        seconds = alternating_medians({(d, w): through(d, w) for d in CANDIDATES for w in WIDTHS}, ROUNDS,
                                      warmup_rounds=1)
    return {d: {str(w): round(seconds[d, w] * 1000, 3) for w in WIDTHS} for d in CANDIDATES}


def decide(ms: dict) -> tuple[str, str]:
    """Of AUTO, the dtype whose step (a one-token pass plus a 5-token verify pass) is cheapest, and
    why, with what w8a8 would gain."""
    cost = {d: sum(ms[d].values()) for d in ms}
    best = min(AUTO, key=cost.get)
    runner_up = min((d for d in AUTO if d != best), key=cost.get)
    detail = ", ".join(f"{d} {ms[d]['1']:.1f} / {ms[d]['5']:.1f} ms" for d in ms)
    why = f"measured {cost[runner_up] / cost[best]:.1f}x faster than {runner_up} here (1 / 5 rows: {detail})"
    if "w8a8" in cost and cost["w8a8"] < cost[best]:
        why += f"; --dtype w8a8 would be {cost[best] / cost['w8a8']:.2f}x faster, quantised"
    return best, why


def measured(cache: Path | None = None) -> dict:
    """{ms, machine}: this machine's timings, cached under `cache` (default
    $SPECDECODE_CACHE/machine/) by machine_key, so they are measured once."""
    from .. import registry as models

    path = (cache or models.cache_dir() / "machine") / f"dtype-{machine_key()}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    found = {"ms": measure(), "machine": cpu_description()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{time.time_ns()}.tmp")
    tmp.write_text(json.dumps(found, indent=1) + "\n")
    tmp.replace(path)
    return found


def choice(cache: Path | None = None) -> dict:
    """{dtype, why}: bf16 on a GPU; on a CPU the faster of AUTO measured here."""
    if torch.cuda.is_available():
        return {"dtype": "bfloat16", "why": "a GPU: bf16 runs at memory speed"}
    dtype, why = decide(measured(cache)["ms"])
    return {"dtype": dtype, "why": why}
