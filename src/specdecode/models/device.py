"""Where the models run: `--device cpu | cuda | cuda:N | auto`.

On a GPU transformers models run in backends/hf_slots.SlotRunner, whose passes are captured as CUDA
graphs (an eager small-batch pass there is launch-bound: docs/gpu.md). llama.cpp models run on a GPU
only where the installed llama.cpp was built with GPU offload. Sampling stays on the CPU whatever the
device: runners hand back float32 logits on the CPU, and each request draws from its own CPU
generator, so a seeded request's tokens are the same on every device and in every batch.
"""

from __future__ import annotations

import torch

from .registry import ModelError

CHOICES = "cpu, cuda, cuda:N or auto"


def resolve_device(name: str) -> str:
    """'cpu' or 'cuda[:N]' (auto: the first GPU when torch sees one, else the CPU); a device that is
    not here is refused with what to do instead."""
    wanted = (name or "").strip().lower()
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cpu":
        return "cpu"
    if wanted == "cuda" or wanted.startswith("cuda:"):
        if not torch.cuda.is_available():
            why = ("this torch is a CPU-only build" if torch.version.cuda is None
                   else f"torch (CUDA {torch.version.cuda}) sees no GPU")
            raise ModelError(f"--device {name}: no CUDA device here ({why}); use --device cpu, or auto to take a GPU "
                             "only when there is one")
        index = wanted.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ModelError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                             f"numbered from 0")
        return wanted
    raise ModelError(f"unknown device '{name}': use {CHOICES}")


def on_gpu(device: str) -> bool:
    return device.startswith("cuda")
