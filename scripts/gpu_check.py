"""The device check: what a lent GPU runs, once, in under 8 minutes, and the docs/gpu.md tables from it.

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

    python scripts/gpu_check.py OUT [--small] [--budget-s 420] [--acceptance RESULTS_JSON]
    python scripts/gpu_check.py --render OUT/gpu_check.json     # the markdown tables, to stdout

--small: tiny shapes, to rehearse the whole check on a CPU (tests/test_gpu_scripts.py runs it).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from gpu_costs import bytes_per_token, copy_bandwidth_gbs
from specdecode.advise.tune import time_step, time_widths
from specdecode.bench.metrics import conditional_acceptance
from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.models.backends.hf_slots import SlotRunner
from specdecode.policy.costs import CostCurve, best_k, expected_tokens, pass_seconds

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
WIDTHS = list(range(1, 10))  # 1 + k for k=auto's k in 0..8
K_MAX = WIDTHS[-1] - 1
# The floor the issue sets for a GPU (8B-shaped target, captured runner).
LIMITS = {"step_over_roofline": 2.0, "verify5_over_step": 1.2, "draft_c": 0.35}


def build(shape: dict, device: str):
    config_class, model_class = ((LlamaConfig, LlamaForCausalLM) if shape["arch"] == "llama"
                                 else (Qwen2Config, Qwen2ForCausalLM))
    config = config_class(**{k: v for k, v in shape.items() if k not in ("arch", "label")},
                          max_position_embeddings=8192)
    with torch.device(device):
        return model_class._from_config(config, dtype=torch.bfloat16).eval()


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
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import tiny

    found = {}
    with tempfile.TemporaryDirectory() as root:
        tok = tiny.tokenizer()
        for name, model in (("target", tiny.model()), ("draft", tiny.model(hidden=32, layers=1, seed=1))):
            model.save_pretrained(f"{root}/{name}")
            tok.save_pretrained(f"{root}/{name}")
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


def checks(result: dict) -> list[dict]:
    """The issue's floor on a GPU, from what was measured (nothing on a CPU rehearsal)."""
    out = []
    pair = result["pairs"].get("8b", {})
    kind = "torch-cudagraph"
    target, draft = pair.get("target", {}), pair.get("draft", {})
    if kind in target.get("step_s", {}):
        ratio = target["step_s"][kind] / target["roofline_step_s"]
        out.append({"check": "8B target step / roofline", "value": ratio, "limit": LIMITS["step_over_roofline"]})
        if "5" in target.get("verify_s", {}).get(kind, {}):
            ratio = target["verify_s"][kind]["5"] / target["step_s"][kind]
            out.append({"check": "verify width 5 / one-token step", "value": ratio, "limit": LIMITS["verify5_over_step"]})
    if kind in draft.get("step_s", {}) and kind in target.get("step_s", {}):
        out.append({"check": "draft c (1B / 8B step)", "value": draft["step_s"][kind] / target["step_s"][kind],
                    "limit": LIMITS["draft_c"]})
    for row in out:
        row["passed"] = row["value"] <= row["limit"]
    ex = result.get("exactness", {})
    if "rule" in ex and "naive" in ex:
        out.append({"check": "verify passes, --naive fails (tiny models)", "value": None, "limit": None,
                    "passed": ex["rule"].get("passed") is True and ex["naive"].get("passed") is False})
    return out


def run(args) -> dict:
    start = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (rehearsal)",
                    "torch": torch.__version__, "date": datetime.date.today().isoformat(),
                    "command": " ".join(sys.argv), "context": CONTEXT, "dtype": "bfloat16", "pairs": {},
                    "acceptance": acceptance(args.acceptance), "small": args.small, "skipped": []}

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    def save() -> None:
        result["elapsed_s"] = round(time.perf_counter() - start, 1)
        result["checks"] = checks(result)
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=1))

    result["copy_bandwidth_gbs"] = copy_bandwidth_gbs(device, 0.01 if args.small else 4)
    result["exactness"] = exactness(device, left())
    save()
    print("exactness", json.dumps(result["exactness"]), flush=True)
    for pair_name, shapes in (SMALL_PAIRS if args.small else PAIRS).items():
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
            print(pair_name, kind, json.dumps({"target_step_s": target["step_s"][kind], "c": pair["c"][kind]}),
                  flush=True)
            save()
        del models
        gc.collect()
        if device == "cuda":
            result["peak_gib"] = max(result.get("peak_gib", 0), torch.cuda.max_memory_allocated() / 2**30)
            torch.cuda.empty_cache()
    save()
    (args.out / "gpu_check.md").write_text(render(result))
    return result


def render(result: dict) -> str:
    """The docs/gpu.md tables: every figure as measured by this run, the speedups marked modelled."""
    ms = lambda s: f"{s * 1000:.2f}"  # noqa: E731
    lines = [f"Measured on {result['device']} (torch {result['torch']}), {result['date']}: `{result['command']}`; "
             f"copy bandwidth {result['copy_bandwidth_gbs']:.0f} GB/s, {result['context']}-token context, "
             f"bf16, random weights of {'tiny (rehearsal)' if result.get('small') else 'real'} shapes.", "",
             "| pair | model | runner | one-token step ms | roofline ms | step / roofline |", "|---|---|---|---|---|---|"]
    for pair_name, pair in result["pairs"].items():
        for role in ("target", "draft"):
            m = pair[role]
            for kind, s in m["step_s"].items():
                lines.append(f"| {pair_name} | {m['shape']} | {kind} | {ms(s)} | {ms(m['roofline_step_s'])} | "
                             f"{s / m['roofline_step_s']:.2f}x |")
    lines += ["", "Verify pass by width, as a multiple of the same runner's one-token step:", "",
              "| pair | runner | " + " | ".join(str(w) for w in WIDTHS) + " |",
              "|---|---|" + "---|" * len(WIDTHS)]
    for pair_name, pair in result["pairs"].items():
        target = pair["target"]
        for kind, curve in target["verify_s"].items():
            lines.append(f"| {pair_name} | {kind} | " + " | ".join(
                f"{curve[str(w)] / target['step_s'][kind]:.2f}" for w in WIDTHS) + " |")
    labels = list(result["acceptance"])
    if not labels:
        lines += ["", "No --acceptance given: no modelled speedups."]
    lines += ["", "c (draft step / target step) and the **modelled** speedup of draft speculation over plain "
              "decoding on the same runner, at the real default pair's per-position acceptance measured on a CPU "
              "(best k under k=auto's cost model):", "",
              "| pair | runner | c | " + " | ".join(f"{label}: k, speedup" for label in labels) + " |",
              "|---|---|---|" + "---|" * len(labels)]
    for pair_name, pair in result["pairs"].items():
        for kind, c in pair.get("c", {}).items():
            cells = [f"{pair['modelled'][kind][label]['k']}, {pair['modelled'][kind][label]['speedup']:.2f}x"
                     for label in labels]
            lines.append(f"| {pair_name} | {kind} | {c:.2f} | " + " | ".join(cells) + " |")
    ex = result.get("exactness", {})
    lines += ["", "| check | value | limit | passed |", "|---|---|---|---|"]
    for row in result.get("checks", []):
        value = "-" if row["value"] is None else f"{row['value']:.2f}"
        limit = "-" if row["limit"] is None else f"<= {row['limit']}"
        lines.append(f"| {row['check']} | {value} | {limit} | {'yes' if row['passed'] else '**no**'} |")
    for label in ("rule", "naive"):
        if label in ex and "passed" in ex[label]:
            e = ex[label]
            lines.append(f"\n`verify` ({label}) on the {e['backend']} runner: passed={e['passed']}, {e['samples']} "
                         f"samples, p = {e['p_value']:.3g}, first-token p = {e['first_token_p']:.3g}")
    if result["skipped"]:
        lines += ["", "Skipped: " + "; ".join(result["skipped"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--acceptance", type=Path, default=None, help="a `specdecode bench` results.json of the real "
                    "default pair's draft proposer, measured on a CPU")
    ap.add_argument("--render", type=Path, default=None, help="print the tables of a gpu_check.json")
    args = ap.parse_args()
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return
    if args.out is None:
        ap.error("give OUT (a directory for gpu_check.json) or --render FILE")
    result = run(args)
    failed = [row["check"] for row in result["checks"] if not row["passed"]]
    print(f"checks failed: {', '.join(failed)}" if failed else "all checks passed", flush=True)


if __name__ == "__main__":
    main()
