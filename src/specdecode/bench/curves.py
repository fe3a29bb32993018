"""What one target pass and one draft token cost on this machine, by runtime: the numbers k=auto,
`--target auto` and `--draft auto` choose by, measured here on demand (`specdecode profile curve`,
`specdecode profile draft-cost`) with the same timing rule, so a user can see them and the docs can
cite them with the machine named.

- **verify curve**: a pass of w tokens over a context of the calibration text, per width and per
  target runtime, and for runners that score trees a two-branch tree of the same width; the cost
  model prices a proposal of k drafts at verify(1 + k), so this curve is what decides k. The
  context's prefill rate comes with it.
- **draft cost**: a one-token draft step beside a target, per draft runtime and shortlist, with the
  draft's agreement with that target over the same text (the acceptance it predicts, greedy and at
  T = 1) and the speedup the cost model predicts from both.
"""

from __future__ import annotations

import time

import torch

from ..models.backends.dtype_choice import cpu_description
from ..models.backends.hf import parse_dtype
from ..models.draft_choice import ROUNDS, calibration_ids, decide, measure
from ..models.loader import as_runner, load, load_draft
from ..models.timing import pass_curve

WIDTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
CONTEXT = 200  # tokens of the calibration text each pass follows


def text_ids(tokenizer, n: int) -> list[int]:
    """The first n tokens of the calibration text (repeated when a tokenizer makes it shorter)."""
    ids = calibration_ids(tokenizer)
    return (ids * (n // len(ids) + 1))[:n]


@torch.inference_mode()
def verify_curves(specs: list[str], widths=WIDTHS, rounds: int = ROUNDS, context: int = CONTEXT,
                  dtype: str = "auto") -> dict:
    """{machine, context, rounds, curves: {spec: {prefill_tokens_per_s, chain_ms: {w: ms}, tree_ms:
    {w: ms}}}}: the context's prefill once per runtime (the first: a cold one), then every runtime
    and width in alternating rounds (models/timing.pass_curve)."""
    dtype = parse_dtype(dtype)
    runners, tokenizer = {}, None
    for spec in specs:
        model, tok = load(spec, "target", dtype, max_rows=1)
        runners[spec], tokenizer = as_runner(model), tokenizer or tok
    ids = text_ids(tokenizer, context + max(widths))
    prefill = {}
    for spec, runner in runners.items():
        start = time.perf_counter()
        runner.add_rows(ids[:context])
        prefill[spec] = context / (time.perf_counter() - start)
    times = pass_curve(runners, ids[context:], widths, rounds, trees=True)
    for runner in runners.values():
        runner.remove_rows([0])
    curves = {spec: {"prefill_tokens_per_s": round(prefill[spec], 1),
                     "chain_ms": {str(w): round(times[(spec, w)] * 1000, 2) for w in widths},
                     "tree_ms": {str(w): round(times[(spec, "tree", w)] * 1000, 2) for w in widths
                                 if (spec, "tree", w) in times}}
              for spec in specs}
    return {"machine": cpu_description(), "dtype": dtype, "context": context, "rounds": rounds, "curves": curves}


@torch.inference_mode()
def draft_costs(target: str, drafts: list[str], dtype: str = "auto") -> dict:
    """draft_choice's measurement and decision over the drafts given, beside `target`, without
    caching: {machine, target, verify_ms, choice, why, table: {draft: {draft_ms, greedy, sampled,
    speedup_greedy, ...}}}."""
    dtype = parse_dtype(dtype)
    target_model, tokenizer = load(target, "target", dtype, max_rows=1)
    runners = {spec: as_runner(load_draft(spec, dtype, target_model, tokenizer, max_rows=1)[0]) for spec in drafts}
    found = measure(as_runner(target_model), runners, calibration_ids(tokenizer))
    return {"machine": cpu_description(), "target": target, "dtype": dtype, "verify_ms": found["verify_ms"],
            **decide(found)}
