"""`--draft auto`: the default draft model on the runtime, quantisation and vocabulary shortlist
that makes it fastest beside this target on this machine, measured once (under three minutes on a
2-core CPU, writing the shortlisted GGUFs included) and cached per machine, target and dtypes.

Every candidate is the same 0.5B draft, so the choice changes speed only, never the output
distribution: the rejection step is exact whatever q is. What differs is what a draft token costs
(llama.cpp Q4_0 reads a third of the bytes of torch bf16; a 32k-token shortlist skips most of the
LM head) and how often the target accepts it (quantisation and a shortlist each cost a little).
Neither is knowable from the CPU flags, so both are measured:

- **cost**: one-token draft steps after the calibration text, timed in alternating rounds across the
  candidates (a shared machine drifts; alternation puts the drift on all alike), and the target's
  verify pass at widths 1 .. K_MAX + 1 after the same text; each draft's prefill of the text, which
  prices its catch-up (a prompt it has not read, or tokens it missed while the lookup drafted)
  before k=auto has timed one;
- **acceptance**: the target and each draft read the shipped calibration text (data/calibration.txt,
  held out of the shortlist's corpus) in one pass each; greedy, a drafted token is accepted when the
  two argmaxes agree; at T = 1 the chance is sum_x min(p(x), q(x)), the rejection rule's acceptance
  probability. Human text is harder to predict than the model's own, so these rates sit below what
  a generation sees; they rank candidates, k=auto then learns the real rates pass by pass.

Each candidate's tokens/s is predicted with the one cost model (costs.best_k: E(k) / (k x draft
step + verify(1 + k)), every position accepted at the measured rate), greedy and at T = 1, and the
candidate with the highest mean speedup over plain decoding is chosen.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

import torch

from ..policy.costs import CostCurve, best_k_at_rate
from .timing import alternating_medians, as_engine_runs, pass_curve

AUTO = "auto"
K_MAX = 8
ROUNDS = 3
STEPS = 6  # one-token draft steps per round
MAX_TOKENS = 384
SHORTLISTS = (16, 32, 64)  # thousands of tokens, for the llama.cpp Q4_0 draft
VERSION = 4  # what is measured and the decision rule: each draft's step under the engine's torch threads


def candidates(llamacpp_available: bool) -> list[str]:
    """The default draft on every runtime this installation has: torch (with and without a 32k
    shortlist) and, with the llamacpp extra, llama.cpp as shipped, requantised to Q4_0, and Q4_0
    over shortlists of several sizes."""
    found = ["hf:default", "hf:default+v32k"]
    if llamacpp_available:
        found += ["llamacpp:default", "llamacpp:default@q4_0",
                  *(f"llamacpp:default@q4_0+v{n}k" for n in SHORTLISTS)]
    return found


def calibration_ids(tokenizer) -> list[int]:
    text = (resources.files("specdecode") / "data" / "calibration.txt").read_text(encoding="utf-8")
    return tokenizer.encode(text)[:MAX_TOKENS]


def agreement(p_logits: torch.Tensor, q_logits: torch.Tensor) -> dict:
    """Acceptance of one draft against the target over the same positions: greedy (argmaxes
    agree) and at T = 1 (sum of min(p, q), the chance that a token drawn from q is accepted)."""
    width = min(p_logits.shape[-1], q_logits.shape[-1])
    p, q = p_logits[:, :width].float(), q_logits[:, :width].float()
    greedy = (p.argmax(-1) == q.argmax(-1)).float().mean().item()
    sampled = torch.minimum(p.softmax(-1), q.softmax(-1)).sum(-1).mean().item()
    return {"greedy": round(greedy, 4), "sampled": round(sampled, 4)}


def predicted_speedup(rate: float, draft_s: float, verify: CostCurve) -> tuple[int, float]:
    """(best k, tokens/s at that k over plain decoding's) when every draft position is accepted
    with chance `rate` given the ones before it."""
    k, tokens_per_s = best_k_at_rate(rate, draft_s, verify, K_MAX)
    return k, tokens_per_s * verify(1)


def prefill_seconds(runner, ids: list[int]) -> float:
    """A draft row's catch-up on ids[1:] as a generation runs it (last position's logits only). The
    row holds all of ids before and after; it is read again from its first token."""
    runner.rollback([runner.length(0) - 1])
    start = time.perf_counter()
    runner.forward([ids[1:]], last_only=True)
    return time.perf_counter() - start


@torch.inference_mode()
def measure(target, drafts: dict, ids: list[int]) -> dict:
    """Per draft runner: draft step seconds and agreement with `target` over `ids`; and the
    target's verify curve. Runners (engine Runners) must hold no rows; they hold none after."""
    target.add_rows(ids[:1])
    p_logits = target.forward([ids[1:]])[0]

    verify = {w: s for (_, w), s in pass_curve({"target": target}, ids, range(1, K_MAX + 2), ROUNDS).items()}
    target.remove_rows([0])
    found: dict[str, dict] = {}
    for name, runner in drafts.items():
        runner.add_rows(ids[:1])
        found[name] = agreement(p_logits, runner.forward([ids[1:]])[0])
        runner.forward([ids[:1]], last_only=True)  # warm-up
        runner.rollback([1])
        found[name]["prefill_ms_per_token"] = round(prefill_seconds(runner, ids) * 1000 / (len(ids) - 1), 4)
        found[name]["prefill_tokens"] = len(ids) - 1

    def draft_step(runner, i=[0]):
        runner.forward([ids[i[0] % STEPS:i[0] % STEPS + 1]], last_only=True)
        runner.rollback([1])
        i[0] += 1

    steps = alternating_medians({n: as_engine_runs([target, r], lambda r=r: draft_step(r)) for n, r in drafts.items()},
                                ROUNDS, STEPS)
    for name, runner in drafts.items():
        runner.remove_rows([0])
        found[name]["draft_ms"] = round(steps[name] * 1000, 3)
    return {"drafts": found, "verify_ms": {str(w): round(t * 1000, 3) for w, t in verify.items()}}


def decide(measured: dict) -> dict:
    """{choice, why, table}: every candidate's predicted speedup (greedy and T = 1, with the k the
    cost model picks) and the one with the highest mean."""
    verify = CostCurve({int(w): ms / 1000 for w, ms in measured["verify_ms"].items()})
    table = {}
    for name, m in measured["drafts"].items():
        k0, s0 = predicted_speedup(m["greedy"], m["draft_ms"] / 1000, verify)
        k1, s1 = predicted_speedup(m["sampled"], m["draft_ms"] / 1000, verify)
        table[name] = {**m, "c": round(m["draft_ms"] / 1000 / verify(1), 3), "k_greedy": k0,
                       "speedup_greedy": round(s0, 3), "k_t1": k1, "speedup_t1": round(s1, 3)}
    if not table:
        raise ValueError("no draft candidate could be measured")
    score = {name: (row["speedup_greedy"] + row["speedup_t1"]) / 2 for name, row in table.items()}
    # Ties (most often: no candidate pays against this target, every one predicted at plain speed)
    # go to the cheapest draft, whose probes and catch-ups cost least when k=auto tries it again.
    choice = max(score, key=lambda n: (score[n], -table[n]["c"]))
    row = table[choice]
    runner_up = max((n for n in score if n != choice), key=score.get, default=None)
    why = (f"predicted {row['speedup_greedy']:.2f}x plain greedy, {row['speedup_t1']:.2f}x at T=1 (c = {row['c']}, "
           f"acceptance {row['greedy']:.0%} / {row['sampled']:.0%} on the calibration text)")
    if runner_up is not None:
        why += f"; next best {runner_up} at {score[runner_up]:.2f}x"
    return {"choice": choice, "why": why, "table": table}


def cache_path(target_spec: str, target_backend: str, dtype: str, draft_dtype: str, names: list[str],
               cache: Path | None = None) -> Path:
    from . import measured

    return measured.cache_file("draft", [VERSION, target_spec, target_backend, dtype, draft_dtype, names], cache)


def cache_path_beside(target_spec: str, target_model, dtype: str, draft_dtype: str,
                      cache: Path | None = None) -> tuple[Path, list[str]]:
    """(cache file, candidate names) of `--draft auto` beside this loaded target here."""
    from .backends import llamacpp
    from .loader import backend_name

    names = candidates(llamacpp.available())
    return cache_path(target_spec, backend_name(target_model), dtype, draft_dtype, names, cache), names


def choose(target_spec: str, target_model, tokenizer, dtype: str, draft_dtype: str, cache: Path | None = None,
           log=None) -> dict:
    """{choice, why, table, ...} for `--draft auto` beside this target, measured on first use and
    cached (draft-<key>.json under $SPECDECODE_CACHE/machine/). Candidates that cannot load here or
    whose vocabulary does not match the target are left out, with the reason."""
    from . import measured
    from .backends.dtype_choice import cpu_description
    from .loader import as_runner, load_draft

    path, names = cache_path_beside(target_spec, target_model, dtype, draft_dtype, cache)
    if (found := measured.read(path)) is not None:
        return found
    if log is not None:
        log(f"--draft auto: measuring {len(names)} ways to run the default draft beside this target (once per "
            "machine; a few minutes on a small CPU)")
    drafts, skipped = {}, {}
    for name in names:
        try:
            drafts[name] = as_runner(load_draft(name, draft_dtype, target_model, tokenizer, max_rows=1)[0])
        except Exception as exc:  # noqa: BLE001 - one runtime failing here leaves the others to choose from
            skipped[name] = f"{type(exc).__name__}: {exc}"
    if not drafts:
        from .registry import ModelError

        raise ModelError("--draft auto found no way to run the default draft beside this target ("
                         + "; ".join(f"{n}: {why}" for n, why in skipped.items())
                         + "): name a draft with --draft")
    got = measure(as_runner(target_model), drafts, calibration_ids(tokenizer))
    found = {**decide(got), "verify_ms": got["verify_ms"], "skipped": skipped,
             "target": target_spec, "dtype": dtype, "draft_dtype": draft_dtype, "machine": cpu_description()}
    measured.write(path, found)
    return found


def measured_beside(target_spec: str, target_model, dtype: str, draft_dtype: str, draft: str,
                    cache: Path | None = None) -> dict | None:
    """A cached `--draft auto` measurement beside this target, pointed at `draft` (a named draft)
    where that measurement covered it; None where it did not, or nothing is cached. Never measures.

    A named draft is then priced and its acceptance seeded from what was measured here, as the
    draft auto picks is: unpriced, with the knob's prior, k=auto can judge a good draft's catch-up
    not worth it and keep it off for most of a short generation."""
    from . import measured

    found = measured.read(cache_path_beside(target_spec, target_model, dtype, draft_dtype, cache)[0])
    if found is None or draft.strip() not in found.get("table", {}):
        return None
    return {**found, "choice": draft.strip(), "why": f"named; measured here beside {target_spec}"}


def cached(cache: Path | None = None) -> list[dict]:
    """Every choice measured on this machine so far (for `specdecode models`)."""
    from . import measured

    return measured.cached("draft", cache)
