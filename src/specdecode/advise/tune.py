"""Choosing the proposal length from measured costs and measured acceptance.

tokens/s(k) = E_k / (draft cost of k tokens + verify cost of the pass + per-pass overhead), where
E_k = 1 + sum_{i<k} A_i is the expected number of tokens a pass emits and A_i the measured fraction
of passes that accepted draft i (drafts are accepted in order, so A_i already includes the chance of
reaching position i). A_i is counted from each pass's acceptance chances (the product of
min(1, p/q) up to position i) rather than from its realised accept/reject draws: the same
expectation, with the rejection step's own randomness integrated out. One acceptance run at k_max
gives A_i for every smaller k; the verify cost is
measured for every width because on CPUs it is not flat (docs/choosing-k.md). The bare verify curve and
the bare draft step are then scaled to what the acceptance runs' real passes cost.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import isotonic_regression

from ..engine.engine import Engine
from ..models.timing import alternating_medians
from ..policy.costs import CostCurve
from ..proposers.suffix import memories_for
from ..sampling.params import SamplingParams

CONFIG_KEYS = ("proposer", "k", "target", "draft", "dtype", "draft_dtype", "draft_context")


@dataclass
class Costs:
    verify_s: dict[int, float]  # tokens scored in one target pass -> seconds
    draft_token_s: float  # one draft forward of one token (0 for ngram)
    lookup_s: float  # one n-gram lookup
    suffix_lookup_s: float = 0.0  # one suffix lookup (the request's own index and the memory)

    def verify(self, width: float) -> float:
        """Cost of a pass of (possibly fractional, i.e. average) width, on the engine's cost curve."""
        return CostCurve(self.verify_s)(width)


@dataclass
class Acceptance:
    proposer: str
    k_max: int
    accepted_at: list[float]  # A_i: fraction of passes that accepted draft i
    drafted_at: list[float]  # fraction of passes that drafted position i (ngram may draft fewer)
    other_per_pass_s: float  # sampling, rejection and bookkeeping per pass
    draft_per_pass_s: float = 0.0  # measured, for reports
    passes: int = 0
    verify_per_pass_s: float = 0.0  # what the real passes of the acceptance run cost (at k_max)
    # Fraction of passes in which the draft model drafted position i: drafted_at for the draft
    # model, none for the lookup, the model's share of the passes for the hybrid (whose lookup
    # drafts for free where it matches). Defaults to drafted_at for "draft", else to nothing.
    model_drafted_at: list[float] | None = None

    def model_tokens(self, k: int) -> float:
        """Tokens the draft model drafts per pass at k (each costs a draft forward)."""
        at = self.model_drafted_at
        if at is None:
            at = self.drafted_at if self.proposer == "draft" else []
        return float(sum(min(1.0, d) for d in at[:k]))


@dataclass
class Prediction:
    proposer: str
    k: int
    expected_tokens_per_pass: float
    pass_s: float
    predicted_tokens_per_s: float
    measured_tokens_per_s: float | None = None
    costs: dict = field(default_factory=dict)


def sync(runner) -> None:
    """Wait for the runner's queued GPU work: CUDA kernels run asynchronously, so a clock read without
    this measures the launch of a pass, not the pass."""
    device = getattr(runner, "device", None)
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def time_widths(runner, prompt_ids: list[int], widths: list[int], repeats: int = 5) -> dict[int, float]:
    """Median seconds of one pass scoring `width` tokens (logits for each) after prompt_ids[:-1], on
    a scratch row of an idle runner.

    Widths are timed in rounds (ascending, then descending, ...), not one width after the other:
    a shared machine's speed drifts by tens of percent within minutes, and timing the widths in
    sequence would read that drift as a slope.
    """
    runner.add_rows(prompt_ids[:-1])
    row = runner.rows - 1

    def scored(width: int):
        def run():
            runner.forward([prompt_ids[-1:] + [prompt_ids[-1]] * (width - 1)])
            sync(runner)  # a GPU pass counts when it is done
        return run

    sync(runner)
    try:
        return alternating_medians({w: scored(w) for w in widths}, repeats, serpentine=True,
                                   after=lambda w: runner.rollback([w]))
    finally:
        runner.remove_rows([row])


@torch.inference_mode()
def time_step(runner, prompt_ids: list[int], steps: int = 10, warmup: int = 0) -> float:
    """Median seconds of a one-token pass (a draft step, or plain decoding) after the prompt, on a
    scratch row of an idle runner; the first `warmup` steps are not counted (a compiled step traces
    on its first call)."""
    runner.add_rows(prompt_ids)
    row = runner.rows - 1
    times = []
    try:
        for i in range(warmup + steps):
            sync(runner)
            t0 = time.perf_counter()
            runner.forward([[prompt_ids[-1 - (i % 4)]]], last_only=True)
            sync(runner)
            times.append(time.perf_counter() - t0)
    finally:
        runner.remove_rows([row])
    return statistics.median(times[warmup:])


def measure_costs(gen: Engine, prompt_ids: list[int], max_width: int = 16, repeats: int = 5) -> Costs:
    """The target's verify pass by width, the draft's cost per token and one n-gram lookup.

    A pass over more tokens never costs less, so the widths' medians are fitted non-decreasing
    (isotonic regression): a dip at one width is noise, not a bargain.
    """
    verify = monotone(time_widths(gen.target, prompt_ids, list(range(1, max_width + 1)), repeats))
    draft_s = 0.0
    if "draft" in gen.proposers:
        draft_s = time_step(gen.proposers["draft"].runner, prompt_ids, steps=repeats * 2)
    from ..proposers.ngram import lookup
    from ..proposers.suffix_index import SuffixIndex

    arr = np.asarray(prompt_ids * 4)
    t0 = time.perf_counter()
    for _ in range(20):
        lookup(arr, 8, 3, 1)
    lookup_s = (time.perf_counter() - t0) / 20
    index = SuffixIndex()
    index.add(prompt_ids * 4)
    t0 = time.perf_counter()
    for _ in range(20):
        index.lookup(prompt_ids, 8)
    # Two indexes are searched per pass: the request's own and the memory.
    return Costs(verify, draft_s, lookup_s, 2 * (time.perf_counter() - t0) / 20)


def monotone(by_width: dict[int, float]) -> dict[int, float]:
    """The closest non-decreasing curve (least squares) through the measured medians."""
    widths = sorted(by_width)
    fitted = isotonic_regression([by_width[w] for w in widths]).x
    return {w: float(t) for w, t in zip(widths, fitted)}


def measure_acceptance(gen: Engine, prompts: list[list[int]], proposers: list[str], k_max: int,
                       params: SamplingParams, progress=None) -> dict[str, list[dict]]:
    """Run every prompt at k_max with each proposer; per proposer, the per-prompt stats, to be pooled
    by `acceptance_from`. The proposers take turns on each prompt, in alternating order, so that
    the machine's drift falls on all of them alike (their passes set the verify scale they share)."""
    runs: dict[str, list[dict]] = {name: [] for name in proposers}
    # Each proposer's suffix memory holds its own earlier answers only (suffix and hybrid-suffix
    # share the proposer): as when it serves alone.
    memories = {name: OrderedDict() for name in proposers}
    for i, ids in enumerate(prompts):
        for name in proposers if i % 2 == 0 else proposers[::-1]:
            with memories_for(gen.proposers, memories[name]):
                runs[name].append(gen.generate(ids, params, k=k_max, chat=False, proposer=name).stats)
            if progress:
                progress()
    return runs


def acceptance_from(runs: list[dict], proposer: str, k_max: int) -> Acceptance:
    """Pool per-prompt stats (all prompts, or one category's) into per-position acceptance."""
    accepted = np.zeros(k_max)
    drafted = np.zeros(k_max)
    passes = model_passes = 0
    other = draft = verify = 0.0
    for s in runs:
        # The expected counts (acceptance chances, see GenerationStats) rather than the realised
        # ones: the same mean, and at temperature > 0 much less noise from a few sampled runs.
        per_position = s.get("expected_per_position", s["accepted_per_position"])
        n = len(per_position)
        accepted[:n] += per_position
        drafted[:n] += s["drafted_per_position"]
        passes += s["target_passes"]
        other += s["other_s"]
        draft += s["draft_s"]
        verify += s["verify_s"]
        model_passes += s.get("by_source", {}).get("draft", [0])[0]
    passes = max(passes, 1)
    drafted_at = (drafted / passes).tolist()
    # The hybrid's draft model drafts k tokens whenever the lookup finds nothing: at every position
    # in that share of the passes. (The draft alone: its own drafted_at.)
    model_at = [model_passes / passes] * k_max if proposer in ("hybrid", "hybrid-suffix") else None
    return Acceptance(proposer, k_max, (accepted / passes).tolist(), drafted_at, other / passes,
                      draft / passes, passes, verify / passes, model_at)


RUN_KEYS = ("prompt_tokens", "new_tokens", "target_passes", "accepted_per_position", "expected_per_position",
            "drafted_per_position", "by_source", "draft_s", "verify_s", "other_s", "prefill_s", "total_s")


def run_summary(stats: dict) -> dict:
    """What `acceptance_from` reads from a run's stats (no per-pass steps)."""
    return {key: stats[key] for key in RUN_KEYS if key in stats}


def predict(costs: Costs, acc: Acceptance, k: int, scale: float | None = None,
            draft_scale_: float | None = None) -> Prediction:
    """tokens/s of `acc.proposer` at k; `scale` and `draft_scale_` correct the bare verify curve and
    the bare draft step to what real passes cost (`verify_scale`, `draft_scale`), from this
    acceptance run alone unless given."""
    k = min(k, acc.k_max)
    tokens = 1.0 + sum(acc.accepted_at[:k])
    width = 1.0 + sum(min(1.0, d) for d in acc.drafted_at[:k])  # average tokens scored per pass
    draft = acc.model_tokens(k) * costs.draft_token_s * (draft_scale(costs, [acc]) if draft_scale_ is None
                                                         else draft_scale_)
    if acc.proposer != "draft" and k:
        draft += costs.suffix_lookup_s if acc.proposer in ("suffix", "hybrid-suffix") else costs.lookup_s
    verify = costs.verify(width) * (verify_scale(costs, [acc]) if scale is None else scale)
    pass_s = draft + verify + acc.other_per_pass_s
    return Prediction(acc.proposer, k, tokens, pass_s, tokens / pass_s,
                      costs={"draft_s": draft, "verify_s": verify, "other_s": acc.other_per_pass_s})


def predict_plain(costs: Costs, acc: Acceptance, scale: float | None = None) -> Prediction:
    """Plain decoding (proposer none, k=0) under the same cost model: one token per width-1 pass."""
    verify = costs.verify(1) * (verify_scale(costs, [acc]) if scale is None else scale)
    pass_s = verify + acc.other_per_pass_s
    return Prediction("none", 0, 1.0, pass_s, 1.0 / pass_s,
                      costs={"draft_s": 0.0, "verify_s": verify, "other_s": acc.other_per_pass_s})


def candidates(costs: Costs, accs: dict[str, Acceptance], k_values: list[int]) -> list[Prediction]:
    """Plain decoding, then every (proposer, k): where no proposer pays, the advice is not to speculate.
    All of them under one verify scale and one draft scale, so that the proposers are compared on the
    same costs."""
    scale, dscale = verify_scale(costs, list(accs.values())), draft_scale(costs, list(accs.values()))
    first = next(iter(accs.values()))
    return [predict_plain(costs, first, scale)] + [predict(costs, acc, k, scale, dscale) for acc in accs.values()
                                                   for k in k_values]


def verify_scale(costs: Costs, accs: list[Acceptance]) -> float:
    """Real passes cost more than the bare forward timed on the median prompt: contexts are longer
    (the long-prompt categories), and sampling and the rejection step come with every pass. The
    acceptance runs' passes measured that; scale the curve so that it agrees with them in total.
    One scale for all proposers: each proposer's own would carry the drift of the minutes its run
    happened to take, and pick the proposer that ran while the machine was fast."""
    measured = modelled = 0.0
    for acc in accs:
        if acc.verify_per_pass_s:
            width = 1.0 + sum(min(1.0, d) for d in acc.drafted_at)
            weight = max(acc.passes, 1)
            measured += acc.verify_per_pass_s * weight
            modelled += costs.verify(width) * weight
    return measured / modelled if measured > 0 and modelled > 0 else 1.0


def draft_scale(costs: Costs, accs: list[Acceptance]) -> float:
    """The bare draft step is a few seconds' sample of a machine whose speed drifts, and real draft
    tokens also pay for catching the draft up on the tokens the last pass accepted and, sampling,
    for the full q the rejection step needs. Scale the step so that it agrees in total with the
    acceptance runs' draft time (minutes of passes, interleaved with the other proposers), pooled
    like `verify_scale`. A factor: the acceptance runs all draft at k_max, which cannot tell a part
    every pass pays from a part a token (k=auto learns both, from passes of several k:
    policy/costs.DraftCost)."""
    measured = modelled = 0.0
    for acc in accs:
        tokens = acc.model_tokens(acc.k_max)
        if tokens > 0 and acc.draft_per_pass_s > 0:
            weight = max(acc.passes, 1)
            measured += acc.draft_per_pass_s * weight
            modelled += tokens * costs.draft_token_s * weight
    return measured / modelled if measured > 0 and modelled > 0 else 1.0


def recommend(predictions: list[Prediction]) -> Prediction:
    return max(predictions, key=lambda p: p.predicted_tokens_per_s)


def measured_tokens_per_s(gen: Engine, prompts: list[list[int]], proposer: str, k: int,
                          params: SamplingParams, progress=None) -> float:
    tokens = seconds = 0.0
    # A fresh suffix memory: the acceptance runs' answers to these very prompts are not a memory
    # any server would start with.
    with memories_for(gen.proposers, OrderedDict()):
        for ids in prompts:
            s = gen.generate(ids, params, k=k, chat=False, proposer=proposer).stats
            # Decode speed: the prefill is the same for every k and would blur the comparison.
            tokens += s["new_tokens"]
            seconds += s["total_s"] - s["prefill_s"]
            if progress:
                progress()
    return tokens / seconds if seconds > 0 else 0.0


def save_config(path: Path, choice: dict) -> None:
    path.write_text(json.dumps({key: choice.get(key) for key in CONFIG_KEYS} | {"source": "specdecode tune"},
                               indent=1) + "\n")


def load_config(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file not found: {p}")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p} must hold a JSON object with keys among {', '.join(CONFIG_KEYS)}")
    unknown = set(data) - set(CONFIG_KEYS) - {"source", "predicted_tokens_per_s"}
    if unknown:
        raise ValueError(f"{p}: unknown keys {sorted(unknown)}; expected {', '.join(CONFIG_KEYS)}")
    window = data.get("draft_context")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise ValueError(f"{p}: draft_context is a number of prompt tokens >= 1 (or null for the whole prompt), "
                         f"got {window!r}")
    return {key: data[key] for key in CONFIG_KEYS if data.get(key) is not None}


def as_dict(p: Prediction) -> dict:
    return asdict(p)
