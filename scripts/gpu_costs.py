"""Verify-cost curve and plain inter-token latency on a GPU, against the memory-bandwidth roofline.

The models are randomly initialised at real shapes (an 8B-shaped target, a 1B-shaped draft, bf16):
right for timing and memory, meaningless for acceptance, so speedups are modelled from the measured
costs at given acceptance rates, never measured. Timings go through the same runners and the same
timing functions as `specdecode tune` (`tune.time_widths`, `tune.time_step`), with the GPU
synchronised around every timed pass.

    python scripts/gpu_costs.py OUT_DIR [--small] [--budget-s 420]

--small: tiny shapes, to check the script on a CPU. Steps run cheapest first, and none starts once
--budget-s has passed, so a short lease still returns what it measured; OUT_DIR/gpu_costs.json is
rewritten after every step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.models.backends.hf_static import StaticRunner
from specdecode.models.backends.serial import SerialRunner
from specdecode.advise.tune import sync, time_step, time_widths

SHAPES = {
    "target": dict(label="8B-shaped (Llama-3.1-8B)", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False),
    "draft": dict(label="1B-shaped (Llama-3.2-1B)", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                  num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True),
}
SMALL = {
    "target": dict(label="tiny target", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "draft": dict(label="tiny draft", vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
}
CONTEXT = 512  # prompt tokens before the timed passes: a realistic prompt, not an empty cache
WIDTHS = list(range(1, 17)) + [24, 32, 48, 64]
# Runners in the order they are timed (cheapest first); verify passes always run eagerly.
RUNNERS = {
    "torch": lambda m: BatchRunner(m),
    "torch-static": lambda m: SerialRunner(StaticRunner(m)),
    "torch-compiled": lambda m: SerialRunner(StaticRunner(m, compile=True)),
    "torch-cudagraphs": lambda m: SerialRunner(StaticRunner(m, compile=True, compile_mode="reduce-overhead")),
}


def build(shape: dict, device: str) -> LlamaForCausalLM:
    config = LlamaConfig(**{k: v for k, v in shape.items() if k != "label"}, max_position_embeddings=8192)
    with torch.device(device):
        return LlamaForCausalLM._from_config(config, dtype=torch.bfloat16).eval()


def bytes_per_token(model: LlamaForCausalLM, context: int) -> dict:
    """What one decode pass must read: every weight matrix once (the input embedding only one row,
    unless it is tied to the output head) and the KV cache of the context."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    if not model.config.tie_word_embeddings:
        weights -= model.get_input_embeddings().weight.nbytes
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    kv = c.num_hidden_layers * 2 * c.num_key_value_heads * head_dim * context * 2
    return {"params": sum(p.numel() for p in model.parameters()), "weight_bytes_read": weights, "kv_bytes_read": kv}


def copy_bandwidth_gbs(device: str, gib: float) -> float:
    """Device-to-device copy, bytes read plus written per second: the rate a decode pass can stream."""
    a = torch.empty(int(gib * 2**30) // 2, dtype=torch.bfloat16, device=device)
    b = torch.empty_like(a)
    times = []
    for _ in range(8):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        b.copy_(a)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * a.nbytes / statistics.median(times[2:]) / 1e9


@torch.inference_mode()
def compiled_verify_s(runner: StaticRunner, prompt: list[int], width: int, steps: int = 20) -> float:
    """A verify pass of one fixed width through the runner's compiled step (the runner itself runs
    verify passes eagerly): what verification would cost if each k's pass were captured too."""
    runner.reset()
    runner.forward(prompt[:-1])
    ids = torch.tensor([prompt[-1:] * width], device=runner.device)
    positions = torch.arange(runner.length, runner.length + width, device=runner.device)
    times = []
    for _ in range(3 + steps):  # the first calls trace and capture; the same positions are rewritten
        sync(runner)
        t0 = time.perf_counter()
        runner._step(ids, positions, 0)
        sync(runner)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--runners", default=",".join(RUNNERS), help="which runners' steps to time (comma list)")
    ap.add_argument("--verify-widths", default="5,9", help="widths of the compiled verify pass (comma list)")
    args = ap.parse_args()
    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = SMALL if args.small else SHAPES
    result: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                    "torch": torch.__version__, "context": CONTEXT, "dtype": "bfloat16", "models": {}, "skipped": []}

    def save() -> None:
        result["elapsed_s"] = round(time.perf_counter() - start, 1)
        (args.out / "gpu_costs.json").write_text(json.dumps(result, indent=1))

    result["copy_bandwidth_gbs"] = copy_bandwidth_gbs(device, 0.01 if args.small else 4)
    torch.manual_seed(0)
    models = {role: build(shape, device) for role, shape in shapes.items()}
    prompt = torch.randint(0, shapes["target"]["vocab_size"], (CONTEXT,)).tolist()
    for role, model in models.items():
        reads = bytes_per_token(model, CONTEXT)
        roofline_s = (reads["weight_bytes_read"] + reads["kv_bytes_read"]) / (result["copy_bandwidth_gbs"] * 1e9)
        result["models"][role] = {"shape": shapes[role]["label"], **reads, "roofline_step_s": roofline_s,
                                  "step_s": {}, "compile_s": {}, "verify_s": {}}
        if device == "cuda":
            result["models"][role]["weights_gib_on_gpu"] = torch.cuda.memory_allocated() / 2**30
    save()
    print(json.dumps({k: v for k, v in result.items() if k != "models"}), flush=True)

    for kind, make in ((kind, RUNNERS[kind]) for kind in args.runners.split(",") if kind):
        for role, model in models.items():
            if time.perf_counter() - start > args.budget_s:
                result["skipped"].append(f"{kind} {role}: out of time")
                continue
            torch._dynamo.reset()  # each compiled runner starts from a clean compile cache
            entry = result["models"][role]
            try:
                runner = make(model)
                entry["step_s"][kind] = time_step(runner, prompt, steps=30, warmup=3)
                if getattr(runner.first if isinstance(runner, SerialRunner) else runner, "compiled", False):
                    entry["compile_s"][kind] = runner.first.compile_s
                if role == "target" and kind in ("torch", "torch-static"):
                    entry["verify_s"][kind] = {str(w): t for w, t in
                                               time_widths(runner, prompt, WIDTHS, repeats=5).items()}
                del runner
            except Exception as e:  # one runner failing (e.g. CUDA graphs) must not lose the others
                result["skipped"].append(f"{kind} {role}: {type(e).__name__}: {str(e)[:300]}")
            print(kind, role, {k: v.get(kind) for k, v in entry.items() if k in ("step_s", "compile_s")}, flush=True)
            save()
    # Last, as it compiles once per width: verification captured like the one-token step.
    for width in (int(w) for w in args.verify_widths.split(",") if w):
        if time.perf_counter() - start > args.budget_s:
            result["skipped"].append(f"compiled verify width {width}: out of time")
            continue
        torch._dynamo.reset()
        try:
            runner = RUNNERS["torch-cudagraphs"](models["target"]).first
            result["models"]["target"].setdefault("verify_s", {}).setdefault("torch-cudagraphs", {})[str(width)] = \
                compiled_verify_s(runner, prompt, width)
            del runner
        except Exception as e:
            result["skipped"].append(f"compiled verify width {width}: {type(e).__name__}: {str(e)[:300]}")
        print("compiled verify", width, result["models"]["target"]["verify_s"].get("torch-cudagraphs"), flush=True)
        save()
    if device == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    save()
    print(json.dumps(result, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
