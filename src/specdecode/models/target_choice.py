"""`--target auto`: the default target model on the runtime and quantisation that makes speculative
decoding fastest on this machine, measured once and cached per machine and dtype.

On a CPU the runtime matters more than anything else: the same 1.5B model decodes several times
faster on llama.cpp's quantised kernels than on torch bf16, but llama.cpp's verify pass grows with
its width on a few cores while torch's stays nearly flat, and which effect wins depends on the CPU
(AMX, AVX-512 BF16, cores, memory bandwidth). Neither is knowable from the flags, so both are
measured, for every runtime this installation has (torch; llama.cpp as shipped and requantised to
Q4_0; onnxruntime's int4 export with the onnx extra):

- **cost**: the target's verify pass at widths 1 .. K_MAX + 1 after the calibration text, timed in
  alternating rounds across the candidates, and its prefill rate over that text;
- **acceptance**: of one reference draft (the cheapest default draft this installation runs) against
  each candidate over the calibration text, greedy and at T = 1, as draft_choice measures it:
  quantisation moves the target's distribution a little, and with it what a draft gets accepted.

Each candidate's speculative tokens/s is predicted with the one cost model (policy/costs.best_k, the
rule k=auto uses) at its own verify curve, greedy and at T = 1, and the highest mean wins. Plain
decoding's rate (1 / the one-token pass) is reported beside it: the fastest plain decoder here is
the baseline every report compares against.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..policy.costs import CostCurve, best_k_at_rate
from . import measured
from .timing import alternating_medians, as_engine_runs, pass_curve
from .draft_choice import AUTO, K_MAX, ROUNDS, STEPS, agreement, calibration_ids

VERSION = 1
PREFILL_TOKENS = 256  # of the calibration text, for the prefill rate


def candidates(llamacpp_available: bool, onnx_available: bool | None = None) -> list[str]:
    """The default target on every runtime this installation has (onnx_available: None, look)."""
    if onnx_available is None:
        from .backends import onnx

        onnx_available = onnx.available()
    return ["hf:default", *(["llamacpp:default", "llamacpp:default@q4_0"] if llamacpp_available else []),
            *(["onnx:default"] if onnx_available else [])]


def reference_draft(llamacpp_available: bool) -> str:
    """The draft whose acceptance and cost price every target candidate alike."""
    return "llamacpp:default@q4_0+v32k" if llamacpp_available else "hf:default"


@torch.inference_mode()
def measure(targets: dict, draft, ids: list[int]) -> dict:
    """Per target runner: its prefill rate, verify curve and the reference draft's agreement with it
    over `ids`; and the draft's one-token step. Runners must hold no rows; they hold none after."""
    found: dict[str, dict] = {}
    logits = {}
    cut = min(PREFILL_TOKENS, len(ids))
    for name, runner in targets.items():
        runner.add_rows(ids[:1])
        start = time.perf_counter()
        head = runner.forward([ids[1:cut]])[0]
        seconds = time.perf_counter() - start
        logits[name] = torch.cat([head, runner.forward([ids[cut:]])[0]]) if cut < len(ids) else head
        found[name] = {"prefill_tokens_per_s": round((cut - 1) / seconds, 1)}
    # The verify curve: every candidate and width in alternating rounds, after the same text.
    times = pass_curve(targets, ids, range(1, K_MAX + 2), ROUNDS)
    for name, runner in targets.items():
        runner.remove_rows([0])
        found[name]["verify_ms"] = {str(w): round(times[(name, w)] * 1000, 3) for w in range(1, K_MAX + 2)}
    draft.add_rows(ids[:1])
    q = draft.forward([ids[1:]])[0]

    def step(i=[0]):
        draft.forward([ids[i[0] % len(ids):i[0] % len(ids) + 1]], last_only=True)
        draft.rollback([1])
        i[0] += 1

    draft_s = alternating_medians({"draft": as_engine_runs([draft], step)}, ROUNDS, STEPS)["draft"]
    draft.remove_rows([0])
    for name in targets:
        found[name].update(agreement(logits[name], q))
    return {"targets": found, "draft_ms": round(draft_s * 1000, 3)}


def decide(found: dict) -> dict:
    """{choice, why, table}: every candidate's predicted speculative and plain tokens/s."""
    draft_s = found["draft_ms"] / 1000
    table = {}
    for name, m in found["targets"].items():
        verify = CostCurve({int(w): ms / 1000 for w, ms in m["verify_ms"].items()})
        k0, s0 = best_k_at_rate(m["greedy"], draft_s, verify, K_MAX)
        k1, s1 = best_k_at_rate(m["sampled"], draft_s, verify, K_MAX)
        table[name] = {**m, "plain_tokens_per_s": round(1 / verify(1), 2), "c": round(draft_s / verify(1), 3),
                       "k_greedy": k0, "spec_tokens_per_s_greedy": round(s0, 2), "k_t1": k1,
                       "spec_tokens_per_s_t1": round(s1, 2)}
    if not table:
        raise ValueError("no target candidate could be measured")
    score = {n: (r["spec_tokens_per_s_greedy"] + r["spec_tokens_per_s_t1"]) / 2 for n, r in table.items()}
    choice = max(score, key=score.get)
    fastest_plain = max(table, key=lambda n: table[n]["plain_tokens_per_s"])
    row = table[choice]
    why = (f"predicted {row['spec_tokens_per_s_greedy']:.1f} tok/s greedy (k={row['k_greedy']}), "
           f"{row['spec_tokens_per_s_t1']:.1f} at T=1 with the reference draft (c = {row['c']}); plain "
           f"{row['plain_tokens_per_s']:.1f} tok/s")
    runner_up = max((n for n in score if n != choice), key=score.get, default=None)
    if runner_up is not None:
        why += f"; next best {runner_up} at {score[runner_up]:.1f} tok/s"
    return {"choice": choice, "why": why, "table": table, "fastest_plain": fastest_plain}


def choose(dtype: str, cache: Path | None = None, log=None) -> dict:
    """{choice, why, table, ...} for `--target auto`, measured on first use and cached
    (target-<key>.json under $SPECDECODE_CACHE/machine/). Candidates that cannot load here are left
    out, with the reason."""
    from .backends import llamacpp
    from .backends.dtype_choice import cpu_description
    from .loader import as_runner, load, load_draft
    from .registry import ModelError

    available = llamacpp.available()
    names, ref = candidates(available), reference_draft(available)
    path = measured.cache_file("target", [VERSION, names, ref, dtype], cache)
    if (found := measured.read(path)) is not None:
        return found
    if log is not None:
        log(f"--target auto: measuring {len(names)} ways to run the default target for speculative decoding (once "
            "per machine; a few minutes on a small CPU)")
    targets, skipped, tokenizer, first = {}, {}, None, None
    for name in names:
        try:
            model, tok = load(name, "target", dtype)
            targets[name], tokenizer, first = as_runner(model), tokenizer or tok, first or model
        except Exception as exc:  # noqa: BLE001 - one runtime failing here leaves the others to choose from
            skipped[name] = f"{type(exc).__name__}: {exc}"
    if not targets:
        raise ModelError("--target auto found no way to run the default target ("
                         + "; ".join(f"{n}: {why}" for n, why in skipped.items()) + "): name one with --target")
    draft = as_runner(load_draft(ref, dtype, first, tokenizer, max_rows=1)[0])
    found = {**decide(measure(targets, draft, calibration_ids(tokenizer))), "skipped": skipped,
             "reference_draft": ref, "dtype": dtype, "machine": cpu_description()}
    measured.write(path, found)
    return found


def cached(cache: Path | None = None) -> list[dict]:
    return measured.cached("target", cache)


__all__ = ["AUTO", "candidates", "choose", "decide", "measure", "reference_draft"]
