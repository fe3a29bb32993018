"""The device check: what a lent GPU runs, once, in under 8 minutes (its tables: docs/gpu.md).

Weights cannot travel to a lent machine, so the models are randomly initialised at real shapes (the
default pair's, Qwen2.5-1.5B / 0.5B, and an 8B-shaped target with a 1B-shaped draft, bf16): right for
time and memory, meaningless for acceptance. Speedups are therefore *modelled*: the costs measured
here, at the per-position acceptance measured on a CPU for the real default pair (`--acceptance`, a
`specdecode bench` results.json), priced by the cost model k=auto uses (policy/costs.py).

Per pair and runner: the one-token step of target and draft, the target's verify curve at the widths
k=auto chooses from (1 to 9), c = draft step / target step, the roofline (the bytes one step must read
/ the device's measured copy bandwidth). Runners: `torch` (BatchRunner, eager), `torch-slots`
(SlotRunner, eager) and, on a GPU, `torch-cudagraph` (SlotRunner with every pass shape captured).
Exactness on the device: `specdecode verify` on tiny models there (the right rule must pass, the
naive residual must fail). Each step is skipped once --budget-s has passed, and OUT/gpu_check.json is
rewritten after every step, so a short lease still returns what it measured.

`specdecode profile device OUT [--small] [--budget-s 420] [--acceptance RESULTS_JSON]` runs it;
`--render OUT/gpu_check.json` prints the tables again (bench/device_report.py). --small: tiny
shapes, to rehearse the whole check on a CPU.
"""

from __future__ import annotations

import datetime
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from ..advise.tune import time_step, time_widths
from ..checks import tiny_models
from ..models.backends.hf_batch import BatchRunner
from ..models.backends.hf_slots import SlotRunner
from ..policy.costs import CostCurve, best_k, expected_tokens, pass_seconds
from .device_report import WIDTHS, checks, render
from .metrics import conditional_acceptance

QWEN = dict(arch="qwen2", vocab_size=151936, num_key_value_heads=2, tie_word_embeddings=True)
LLAMA = dict(arch="llama", vocab_size=128256, num_key_value_heads=8, num_attention_heads=32)
PAIRS = {
    "8b": {"target": dict(LLAMA, label="8B-shaped (Llama-3.1-8B)", hidden_size=4096, intermediate_size=14336,
                          num_hidden_layers=32, tie_word_embeddings=False),
           "draft": dict(LLAMA, label="1B-shaped (Llama-3.2-1B)", hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, tie_word_embeddings=True)},
    "default": {"target": dict(QWEN, label="Qwen2.5-1.5B-shaped (default target)", hidden_size=1536,
                               intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
                "draft": dict(QWEN, label="Qwen2.5-0.5B-shaped (default draft)", hidden_size=896,
                              intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14)},
}
TINY = dict(vocab_size=512, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
SMALL_PAIRS = {
    "8b": {"target": dict(TINY, arch="llama", label="tiny llama target", hidden_size=64, num_hidden_layers=2,
                          tie_word_embeddings=False),
           "draft": dict(TINY, arch="llama", label="tiny llama draft", hidden_size=32, num_hidden_layers=1,
                         tie_word_embeddings=True)},
    "default": {"target": dict(TINY, arch="qwen2", label="tiny qwen2 target", hidden_size=64, num_hidden_layers=2,
                               tie_word_embeddings=True),
                "draft": dict(TINY, arch="qwen2", label="tiny qwen2 draft", hidden_size=32, num_hidden_layers=1,
                              tie_word_embeddings=True)},
}
CONTEXT = 512  # prompt tokens before the timed passes
K_MAX = WIDTHS[-1] - 1


def build(shape: dict, device: str):
    config_class, model_class = ((LlamaConfig, LlamaForCausalLM) if shape["arch"] == "llama"
                                 else (Qwen2Config, Qwen2ForCausalLM))
    config = config_class(**{k: v for k, v in shape.items() if k not in ("arch", "label")},
                          max_position_embeddings=8192)
    with torch.device(device):
        return model_class._from_config(config, dtype=torch.bfloat16).eval()


def bytes_per_token(model, context: int) -> dict:
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


def runners(device: str) -> dict:
    kinds = {"torch-slots": lambda m: SlotRunner(m, capture=False), "torch": lambda m: BatchRunner(m)}
    if device == "cuda":  # captured first: the checks read it, and it is the runner a GPU runs
        kinds = {"torch-cudagraph": lambda m: SlotRunner(m, capture=True), **kinds}
    return kinds


def acceptance(path: Path | None) -> dict[str, list[float]]:
    """Conditional per-position acceptance of the real pair's draft proposer, per temperature, from a
    bench results.json (all prompts, the largest k); none: no modelled speedups."""
    if path is None:
        return {}
    data = json.loads(path.read_text())
    records = [r for r in (data["results"] if isinstance(data, dict) else data)
               if r["method"] == "draft" and r["category"] == "all" and r.get("per_position_acceptance")]
    found: dict[str, list[float]] = {}
    for r in sorted(records, key=lambda r: int(r["k"]) if str(r["k"]).isdigit() else 0):
        found[f"T={r['temperature']:g}"] = conditional_acceptance(r["per_position_acceptance"])
    return found


def modelled(verify_s: dict[int, float], step_s: float, draft_s: float, conditional: list[float]) -> dict:
    """Best k and its speedup over plain decoding on the same runner, under k=auto's cost model."""
    curve = CostCurve(verify_s)
    k, rate = best_k(lambda k: expected_tokens(conditional, k), lambda k: pass_seconds(curve, draft_s, k),
                     min(K_MAX, len(conditional)))
    return {"k": k, "speedup": rate * step_s}


def exactness(device: str, budget_left: float) -> dict:
    """`specdecode verify` on tiny models on the device: the rule passes, the naive residual fails."""
    found = {}
    with tempfile.TemporaryDirectory() as root:
        tiny_models.save_pair(root)
        for label, extra in (("rule", ["--seed", "1"]), ("naive", ["--seed", "2", "--naive"])):
            # On a GPU a model directory runs in the captured SlotRunner; on a CPU rehearsal hf-slots: asks
            # for the same runner, uncaptured.
            prefix = "" if device == "cuda" else "hf-slots:"
            cmd = [sys.executable, "-m", "specdecode", "verify", "hello", "--target", f"{prefix}{root}/target",
                   "--draft", f"{prefix}{root}/draft", "--dtype", "fp32", "--proposer", "draft", "--samples", "600", "--length", "2",
                   "--k", "3", "--device", device, "--json", *extra]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, budget_left))
            try:
                report = json.loads(done.stdout)
            except json.JSONDecodeError:
                found[label] = {"exit": done.returncode, "error": done.stderr[-600:]}
                continue
            draft = report["results"]["draft"]
            found[label] = {"exit": done.returncode, "passed": report["passed"], "backend": report["target_backend"],
                            "samples": draft["samples"], "p_value": draft["p_value"],
                            "first_token_p": draft["first_token_exact"]["p_value"]}
    return found


def run(out: Path, small: bool = False, budget_s: float = 420.0, acceptance_path: Path | None = None,
        command: str = "", progress=print) -> dict:
    """Measure, saving OUT/gpu_check.json after every step (a short lease still returns what it
    measured), then write OUT/gpu_check.md."""
    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (rehearsal)",
                    "torch": torch.__version__, "date": datetime.date.today().isoformat(),
                    "command": command, "context": CONTEXT, "dtype": "bfloat16", "pairs": {},
                    "acceptance": acceptance(acceptance_path), "small": small, "skipped": []}

    def left() -> float:
        return budget_s - (time.perf_counter() - start)

    def save() -> None:
        result["elapsed_s"] = round(time.perf_counter() - start, 1)
        result["checks"] = checks(result)
        (out / "gpu_check.json").write_text(json.dumps(result, indent=1))

    result["copy_bandwidth_gbs"] = copy_bandwidth_gbs(device, 0.01 if small else 4)
    result["exactness"] = exactness(device, left())
    save()
    progress(f"exactness {json.dumps(result['exactness'])}")
    for pair_name, shapes in (SMALL_PAIRS if small else PAIRS).items():
        torch.manual_seed(0)
        models = {role: build(shape, device) for role, shape in shapes.items()}
        prompt = torch.randint(0, shapes["target"]["vocab_size"], (CONTEXT,)).tolist()
        pair = result["pairs"][pair_name] = {}
        for role, model in models.items():
            reads = bytes_per_token(model, CONTEXT)
            pair[role] = {"shape": shapes[role]["label"], **reads, "step_s": {}, "verify_s": {},
                          "roofline_step_s": (reads["weight_bytes_read"] + reads["kv_bytes_read"])
                          / (result["copy_bandwidth_gbs"] * 1e9)}
        for kind, make in runners(device).items():
            if left() <= 0:
                result["skipped"].append(f"{pair_name} {kind}: out of time")
                continue
            try:
                for role, model in models.items():
                    runner = make(model)
                    pair[role]["step_s"][kind] = time_step(runner, prompt, steps=20, warmup=3)
                    if role == "target":
                        time_widths(runner, prompt, WIDTHS, repeats=1)  # captures each width once
                        pair[role]["verify_s"][kind] = {str(w): s for w, s in
                                                        time_widths(runner, prompt, WIDTHS, repeats=5).items()}
                    del runner
            except Exception as exc:  # one runner failing (e.g. a capture) must not lose the others
                result["skipped"].append(f"{pair_name} {kind}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            target, draft = pair["target"], pair["draft"]
            verify = {int(w): s for w, s in target["verify_s"][kind].items()}
            pair.setdefault("c", {})[kind] = draft["step_s"][kind] / target["step_s"][kind]
            pair.setdefault("modelled", {})[kind] = {
                label: modelled(verify, target["step_s"][kind], draft["step_s"][kind], cond)
                for label, cond in result["acceptance"].items()}
            progress(f"{pair_name} {kind} {json.dumps({'target_step_s': target['step_s'][kind], 'c': pair['c'][kind]})}")
            save()
        del models
        gc.collect()
        if device == "cuda":
            result["peak_gib"] = max(result.get("peak_gib", 0), torch.cuda.max_memory_allocated() / 2**30)
            torch.cuda.empty_cache()
    save()
    (out / "gpu_check.md").write_text(render(result))
    return result
