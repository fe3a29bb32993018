"""Measuring this machine for `plan --gpu cpu --measure`: the bandwidth a decode pass's kernel
achieves, the matmul peak, and the per-layer overhead, each timed here (never read from a table)."""

from __future__ import annotations

from .plan import GB

def measure_bandwidth_gbs(dtype: str = "bf16", repeats: int = 10) -> float:
    """Effective bandwidth of the kernel a decode pass spends its time in: a one-row matrix-vector
    product streaming a weight matrix far larger than the caches, in the weight format given
    (int8 = PyTorch's dynamically quantised linear). What the roofline needs is what that kernel
    achieves, which on a CPU can be well below the memory's peak."""
    import statistics
    import time
    import warnings

    import torch

    n = 8192
    x = torch.randn(1, n)
    if dtype in ("int8", "fp8", "int4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            layer = quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(n, n, bias=False)), {torch.nn.Linear},
                                     dtype=torch.qint8)
        size = n * n
        run = lambda: layer(x)  # noqa: E731
    else:
        torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        w = torch.randn(n, n).to(torch_dtype)
        xd = x.to(torch_dtype)
        size = n * n * w.element_size()
        run = lambda: torch.nn.functional.linear(xd, w)  # noqa: E731
    with torch.inference_mode():
        run()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    return size / statistics.median(times) / GB


def measure_matmul_tflops(n: int = 2048, repeats: int = 5) -> float:
    """Sustained float32 matmul rate, the compute roof of a CPU pass."""
    import statistics
    import time

    import torch

    a = torch.randn(n, n)
    b = torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e12


def measure_layer_overhead_ms(dtype: str = "bf16", repeats: int = 20) -> float:
    """Per-layer cost of a decode pass that is not reading weights: the Python dispatch of eager
    PyTorch (dozens of small ops per layer, plus quantising activations before each int8 linear).
    Measured as the time difference between tiny models of 12 and 4 layers (weights of a few KB,
    so bandwidth plays no part) decoding one token, in the planned weight format."""
    import statistics
    import time

    import torch
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    def per_token(layers: int) -> float:
        config = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
        model = Qwen2ForCausalLM(config).eval()
        if dtype in ("int8", "fp8", "int4"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torch.ao.quantization import quantize_dynamic

                model = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        elif dtype in ("bf16", "fp16"):
            model = model.to(torch.bfloat16 if dtype == "bf16" else torch.float16)
        cache = DynamicCache(config=config)
        times = []
        with torch.inference_mode():
            model(input_ids=torch.tensor([[1, 2, 3]]), past_key_values=cache, use_cache=True)
            for i in range(repeats):
                t0 = time.perf_counter()
                model(input_ids=torch.tensor([[i % 200]]), past_key_values=cache, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return max(0.0, (per_token(12) - per_token(4)) / 8 * 1000)
