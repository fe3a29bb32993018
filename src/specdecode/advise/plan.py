"""Deployment planning: memory, bandwidth, sharding and the speculative speedup to expect.

A model, not a measurement. Decoding one token reads every weight once, so a pass costs at least
bytes / bandwidth; scoring t tokens costs at least 2 * params * t FLOPs / peak; tensor parallelism
splits both over the devices and adds two all-reduces of the activations per layer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..policy.costs import iid_expected_tokens, iid_speedup

GB = 1e9


@dataclass(frozen=True)
class Device:
    name: str
    memory_gb: float  # capacity per device
    bandwidth_gbs: float  # memory bandwidth per device, GB/s
    bf16_tflops: float  # dense peak
    link_gbs: float  # interconnect bandwidth per device per direction, GB/s
    link_latency_us: float = 8.0  # per all-reduce
    per_layer_overhead_ms: float = 0.0  # launch/dispatch cost per layer per pass (CPU eager mode)


# Public spec-sheet values (dense bf16 peak; SXM parts; NVLink per direction = half the total).
DEVICES = {
    d.name: d
    for d in (
        Device("a100-40gb", 40, 1555, 312, 300),
        Device("a100-80gb", 80, 2039, 312, 300),
        Device("h100-80gb", 80, 3350, 989, 450),
        Device("h200-141gb", 141, 4800, 989, 450),
        Device("l40s", 48, 864, 362, 32, link_latency_us=15.0),  # PCIe 4.0 x16, no NVLink
        Device("b200", 180, 8000, 2250, 900),
        # This machine (2 cores): int8 GEMMs sustain ~0.12 TFLOPS; --measure reads the real values.
        Device("cpu", 24, 27, 0.12, 0, link_latency_us=0.0),
    )
}
ALIASES = {"a100": "a100-80gb", "h100": "h100-80gb", "h200": "h200-141gb", "b200-180gb": "b200"}

# Bytes per weight, including quantisation scales: int8/fp8 with per-channel scales (negligible),
# int4 with a 16-bit scale and zero point per group of 128 weights.
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 4 / 128}


@dataclass(frozen=True)
class Shape:
    name: str
    params: float
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int


# Reference shapes, used when only --params is given (nearest by parameter count).
SHAPES = [
    Shape("qwen2.5-0.5b", 0.494e9, 24, 896, 2, 64, 151936),
    Shape("qwen2.5-1.5b", 1.54e9, 28, 1536, 2, 128, 151936),
    Shape("llama-3.2-1b", 1.24e9, 16, 2048, 8, 64, 128256),
    Shape("qwen2.5-7b", 7.6e9, 28, 3584, 4, 128, 152064),
    Shape("llama-3.1-8b", 8.03e9, 32, 4096, 8, 128, 128256),
    Shape("qwen2.5-32b", 32.8e9, 64, 5120, 8, 128, 152064),
    Shape("llama-3.1-70b", 70.6e9, 80, 8192, 8, 128, 128256),
    Shape("qwen2.5-72b", 72.7e9, 80, 8192, 8, 128, 152064),
    Shape("llama-3.1-405b", 405.8e9, 126, 16384, 8, 128, 128256),
]


def shape_from_params(params: float, **overrides) -> Shape:
    ref = min(SHAPES, key=lambda s: abs(math.log(s.params / params)))
    values = {**asdict(ref), "params": params, "name": f"{params / 1e9:g}B (shape of {ref.name})"}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Shape(**values)


def shape_from_config(config, name: str) -> Shape:
    hidden = config.hidden_size
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    inter = getattr(config, "intermediate_size", 4 * hidden)
    layers = config.num_hidden_layers
    kv = getattr(config, "num_key_value_heads", heads)
    vocab = config.vocab_size
    per_layer = hidden * head_dim * (heads + 2 * kv) + heads * head_dim * hidden + 3 * hidden * inter
    tied = getattr(config, "tie_word_embeddings", False)
    params = layers * per_layer + vocab * hidden * (1 if tied else 2)
    return Shape(name, float(params), layers, hidden, kv, head_dim, vocab)


@dataclass
class PlanInput:
    target: Shape
    draft: Shape | None
    dtype: str = "bf16"
    draft_dtype: str | None = None
    kv_dtype: str = "bf16"
    device: Device = DEVICES["h100-80gb"]
    num_gpus: int = 1
    context: int = 4096
    concurrency: int = 1
    acceptance: float = 0.7
    k_values: list[int] = field(default_factory=lambda: list(range(1, 9)))
    memory_utilization: float = 0.9  # fraction of device memory a serving engine may use
    proposer: str = "draft"  # or "ngram" / "suffix": no draft model, proposals cost nothing


def kv_bytes_per_token(shape: Shape, kv_dtype: str) -> float:
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * WEIGHT_BYTES[kv_dtype]


def workspace_bytes(shape: Shape, weight_bytes: float, concurrency: int, k: int) -> float:
    """Activations, logits and allocator slack: 5% of the weights, at least 1 GB, plus the float32
    logits of every scored position."""
    return max(GB, 0.05 * weight_bytes) + concurrency * (k + 1) * shape.vocab * 4


def pass_time(shape: Shape, weight_bytes: float, kv_bytes_read: float, tokens: int, device: Device, tp: int) -> dict:
    """Lower bounds for one forward pass scoring `tokens` positions (all rows together).

    Every weight is read once, except the input embedding table, of which a pass reads one row
    per token."""
    read = weight_bytes * (1 - shape.vocab * shape.hidden / shape.params)
    memory_s = (read + kv_bytes_read) / tp / (device.bandwidth_gbs * GB)
    compute_s = 2 * shape.params * tokens / tp / (device.bf16_tflops * 1e12)
    allreduce_s = 0.0
    if tp > 1:
        size = tokens * shape.hidden * 2  # bf16 activations
        ring = 2 * (tp - 1) / tp * size / (device.link_gbs * GB)
        allreduce_s = shape.layers * 2 * (ring + device.link_latency_us * 1e-6)
    overhead_s = shape.layers * device.per_layer_overhead_ms / 1000
    return {
        "memory_s": memory_s,
        "compute_s": compute_s,
        "allreduce_s": allreduce_s,
        "overhead_s": overhead_s,
        "total_s": max(memory_s, compute_s) + allreduce_s + overhead_s,
        "bound": "memory" if memory_s >= compute_s else "compute",
    }


def plan(inp: PlanInput) -> dict:
    t, d = inp.target, inp.draft
    lookup = inp.proposer in ("ngram", "suffix")
    if lookup:
        d = None  # a lookup needs no draft model
    speculative = lookup or d is not None
    dev = inp.device
    w_t = t.params * WEIGHT_BYTES[inp.dtype]
    kv_tok = kv_bytes_per_token(t, inp.kv_dtype)
    kv_total = kv_tok * inp.context * inp.concurrency
    k_max = max(inp.k_values) if speculative else 0
    draft_w = d.params * WEIGHT_BYTES[inp.draft_dtype or inp.dtype] if d else 0.0
    draft_kv_tok = kv_bytes_per_token(d, inp.kv_dtype) if d else 0.0
    draft_total = draft_w + draft_kv_tok * inp.context * inp.concurrency
    work = workspace_bytes(t, w_t, inp.concurrency, k_max)
    # Sharded: target weights and KV split over TP ranks; the draft is replicated on every rank.
    target_total = w_t + kv_total + work
    tp_needed = None
    tp = 1
    while tp <= 64:
        per_dev = target_total / tp + draft_total
        heads_ok = t.kv_heads % tp == 0 or tp % t.kv_heads == 0
        if heads_ok and per_dev <= dev.memory_gb * GB * inp.memory_utilization:
            tp_needed = tp
            break
        tp *= 2
    use_tp = max(inp.num_gpus, 1)
    per_device = target_total / use_tp + draft_total
    fits = per_device <= dev.memory_gb * GB * inp.memory_utilization

    # Average KV read per decode pass: every row reads its whole context so far (half the window).
    kv_read = kv_tok * (inp.context / 2) * inp.concurrency
    plain = pass_time(t, w_t, kv_read, inp.concurrency, dev, use_tp)
    rows = []
    for k in inp.k_values if speculative else []:
        verify = pass_time(t, w_t, kv_read, inp.concurrency * (k + 1), dev, use_tp)
        if d is not None:
            dkv_read = draft_kv_tok * (inp.context / 2) * inp.concurrency
            draft_s = pass_time(d, draft_w, dkv_read, inp.concurrency, dev, 1)["total_s"]  # draft is not sharded
        else:
            draft_s = 0.0
        a = inp.acceptance
        tokens = iid_expected_tokens(a, k)
        step = k * draft_s + verify["total_s"]
        itl = step / tokens
        rows.append({
            "k": k,
            "expected_tokens_per_pass": tokens,
            "draft_pass_s": draft_s,
            "verify_pass_s": verify["total_s"],
            "verify_bound": verify["bound"],
            "itl_s": itl,
            "speedup": plain["total_s"] / itl,
            "leviathan_speedup": iid_speedup(a, k, draft_s / plain["total_s"]),
        })
    best = max(rows, key=lambda r: r["speedup"]) if rows else None
    return {
        "target": asdict(t),
        "proposer": inp.proposer,
        "draft": asdict(d) if d else None,
        "device": asdict(dev),
        "num_gpus": use_tp,
        "dtype": inp.dtype,
        "draft_dtype": inp.draft_dtype or inp.dtype,
        "kv_dtype": inp.kv_dtype,
        "context": inp.context,
        "concurrency": inp.concurrency,
        "acceptance": inp.acceptance,
        "weight_bytes": w_t,
        "kv_bytes_per_token": kv_tok,
        "kv_bytes_total": kv_total,
        "draft_bytes": draft_total,
        "workspace_bytes": work,
        "total_bytes": target_total + draft_total,
        "bytes_per_device": per_device,
        "device_budget_bytes": dev.memory_gb * GB * inp.memory_utilization,
        "fits": fits,
        "fits_one_device": target_total + draft_total <= dev.memory_gb * GB * inp.memory_utilization,
        "min_tensor_parallel": tp_needed,
        "plain_pass": plain,
        "plain_itl_s": plain["total_s"],
        "plain_tokens_per_s_per_request": 1 / plain["total_s"],
        "speculative": rows,
        "recommended_k": best["k"] if best and best["speedup"] > 1 else (0 if rows else None),
        "assumptions": ASSUMPTIONS,
    }


ASSUMPTIONS = [
    "a model, not a measurement: lower bounds from bytes/bandwidth and FLOPs/peak (dense bf16 peak for every "
    "weight format), so real engines land above these times",
    "each decode pass reads all target weights once (the input embedding table excepted) plus the KV cache of "
    "half the context per row",
    "tensor parallelism splits target weights and KV evenly, with two ring all-reduces of the bf16 activations "
    "per layer (bandwidth per direction plus a fixed latency each); the draft is replicated on every device",
    "workspace = max(1 GB, 5% of the weights) + float32 logits of all scored positions; a serving engine uses "
    "at most memory_utilization of each device",
    "acceptance is i.i.d. per drafted token: expected tokens per pass (1 - a^(k+1)) / (1 - a)",
    "int4 counts a 16-bit scale and zero point per 128 weights; int8/fp8 scales are negligible",
]
