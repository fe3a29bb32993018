"""Run a benchmark grid: prompts x temperatures x methods x k, interleaved prompt by prompt so that
machine drift affects every method alike; then aggregate per method, k, temperature and category."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import metrics
from ..engine.engine import chat_ids
from ..policy.costs import iid_speedup
from ..sampling.params import SamplingParams
from .methods import ALL_METHODS, PLAIN_METHODS, Method, Run
from .workloads import Prompt


@dataclass
class BenchConfig:
    k_values: list[int | str]  # numbers and/or "auto"
    temperatures: list[float]
    max_new_tokens: int
    repeats: int = 1
    seed: int = 0
    turns: str = "first"  # or "all"
    concurrency: int = 1  # offline bench is sequential; kept in the schema for served load tests
    ignore_eos: bool = False  # every run generates exactly max_new_tokens
    system: str | None = None  # a system message before every conversation (as chat apps send one)


@dataclass
class Grid:
    methods: list[Method]
    skipped: dict[str, str] = field(default_factory=dict)  # method -> reason

    def points(self, k_values: list[int]) -> list[tuple[Method, int | None]]:
        out = []
        for m in self.methods:
            if m.takes_k:
                # k="auto" is our engine's adaptive drafting; the peers have no equivalent flag.
                out.extend((m, k) for k in k_values if k != "auto" or m.takes_auto)
            else:
                out.append((m, None))
        return out

    def skip_methods_without_points(self, k_values: list) -> None:
        """A method the k values give no point (a peer that drafts a fixed k, under k="auto" alone) is
        reported skipped with how to fix it, never left out without a word."""
        running = {m.name for m, _ in self.points(k_values)}
        for m in self.methods:
            if m.name not in running:
                self.skipped[m.name] = "it drafts a fixed k and --k gave only auto: add one, e.g. --k auto,4"


def run_grid(
    grid: Grid,
    prompts: list[Prompt],
    tokenizer,
    config: BenchConfig,
    progress: Callable[[str], None] | None = None,
    runs: list[dict] | None = None,
    on_run: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Every run as one record (per prompt, turn, temperature, method, k and repeat), appended to
    `runs` as it finishes and handed to on_run (the CLI writes each to runs.jsonl at once, so an
    interrupted bench keeps what it measured)."""
    runs = [] if runs is None else runs
    points = grid.points(config.k_values)
    for repeat in range(config.repeats):
        for prompt in prompts:
            for temperature in config.temperatures:
                params = SamplingParams(max_new_tokens=config.max_new_tokens, temperature=temperature,
                                        seed=config.seed + repeat, ignore_eos=config.ignore_eos)
                history: list[dict] = [{"role": "system", "content": config.system}] if config.system else []
                turns = prompt.turns if config.turns == "all" else prompt.turns[:1]
                for turn_index, turn in enumerate(turns):
                    history.append({"role": "user", "content": turn})
                    prompt_ids = chat_ids(tokenizer, history)
                    first_answer = None
                    for method, k in points:
                        run = method.run(prompt_ids, params, k)
                        runs.append(run_record(method, k, temperature, prompt, turn_index, repeat, prompt_ids, run))
                        if on_run:
                            on_run(runs[-1])
                        if first_answer is None:
                            first_answer = run.token_ids
                        if progress:
                            progress(f"{prompt.category} {method.name}{'' if k is None else f' k={k}'}")
                    # Later turns continue the conversation with the first method's answer, so that
                    # every method sees the same prompts.
                    answer = tokenizer.decode(first_answer or [], skip_special_tokens=True)
                    history.append({"role": "assistant", "content": answer})
    return runs


def run_record(method: Method, k, temperature, prompt: Prompt, turn, repeat, prompt_ids, run: Run) -> dict:
    n = len(run.token_ids)
    first = metrics.ttft(run.steps)
    return {
        "method": method.name,
        "backend": method.backend,
        "k": k,
        "temperature": temperature,
        "category": prompt.category,
        "subcategory": prompt.subcategory,
        "prompt_id": prompt.id,
        "turn": turn,
        "repeat": repeat,
        "prompt_tokens": len(prompt_ids),
        "new_tokens": n,
        "total_s": run.total_s,
        "tokens_per_s": n / run.total_s if run.total_s > 0 else 0.0,
        "ttft_s": first,
        "tpot_s": metrics.tpot(run.total_s, first, n) if first is not None else None,
        "itl_s": metrics.itl_per_token(run.steps),
        "target_passes": run.target_passes,
        "drafted_tokens": run.drafted,
        "accepted_tokens": run.accepted,
        "drafted_per_position": run.drafted_per_position,
        "accepted_per_position": run.accepted_per_position,
        "by_source": run.by_source,
        "tree": run.tree,
        "draft_s": run.draft_s,
        "verify_s": run.verify_s,
        "prefill_s": run.prefill_s,
        "peak_rss_bytes": run.peak_rss_bytes,
        "cuda_peak_bytes": run.cuda_peak_bytes,
        "token_ids": run.token_ids,
    }


def complete_groups(runs: list[dict], points: int) -> list[dict]:
    """The runs of every (repeat, prompt, temperature, turn) that all `points` methods finished: an
    interrupted bench compares methods on the same prompts only."""
    key = lambda r: (r["repeat"], r["prompt_id"], r["temperature"], r["turn"])  # noqa: E731
    counts: dict[tuple, int] = {}
    for r in runs:
        counts[key(r)] = counts.get(key(r), 0) + 1
    return [r for r in runs if counts[key(r)] == points]


def aggregate(runs: list[dict]) -> list[dict]:
    """One record per (method, k, temperature, category), plus category "all"."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        for category in (r["category"], "all"):
            groups[(r["method"], r["k"], r["temperature"], category)].append(r)
    records = [_summarise(key, rs) for key, rs in groups.items()]
    by_key = {(r["method"], r["k"], r["temperature"], r["category"]): r for r in records}
    plain_pass = {}  # (temperature, category) -> seconds of one plain target pass
    for r in records:
        if r["method"] == "plain" and r["target_passes"]:
            plain_pass[(r["temperature"], r["category"])] = r["verify_s"] / r["target_passes"]
    # The baseline a user compares against: the fastest plain decoder measured in this run (ours,
    # llama.cpp's own loop, plain torch), per temperature and category.
    fastest: dict[tuple, dict] = {}
    for r in records:
        if r["method"] in PLAIN_METHODS and r["tokens_per_s"]:
            best = fastest.get((r["temperature"], r["category"]))
            if best is None or r["tokens_per_s"] > best["tokens_per_s"]:
                fastest[(r["temperature"], r["category"])] = r
    for r in records:
        for base, key in (("plain", "speedup_vs_plain"), ("hf", "speedup_vs_hf"),
                          ("llamacpp", "speedup_vs_llamacpp")):
            ref = by_key.get((base, None, r["temperature"], r["category"]))
            r[key] = r["tokens_per_s"] / ref["tokens_per_s"] if ref and ref["tokens_per_s"] else None
        best = fastest.get((r["temperature"], r["category"]))
        r["fastest_plain"] = best["method"] if best else None
        r["speedup_vs_fastest_plain"] = r["tokens_per_s"] / best["tokens_per_s"] if best else None
        r["decode_vs_fastest_plain"] = r["decode_tokens_per_s"] / best["decode_tokens_per_s"] \
            if best and best["decode_tokens_per_s"] and r["decode_tokens_per_s"] else None
        t1 = plain_pass.get((r["temperature"], r["category"]))
        r["draft_cost_ratio"] = None
        r["verify_cost_ratio"] = None
        r["predicted_speedup"] = None
        r["predicted_speedup_as_run"] = None
        if r["drafted_tokens"] and t1 and r["draft_s"] is not None and r["k"]:
            # Under k=auto too: the mean cost of the tokens it drafted (the hybrid's lookup drafts
            # count, at no cost), and of its verify passes, each over one plain pass.
            c = (r["draft_s"] / r["drafted_tokens"]) / t1
            v = (r["verify_s"] / r["target_passes"]) / t1
            r["draft_cost_ratio"], r["verify_cost_ratio"] = c, v
            if isinstance(r["k"], int):
                # The i.i.d. prediction needs one fixed k. Leviathan et al.'s assumes a pass of k+1
                # tokens costs one plain pass, true where the target is memory-bound (a GPU) and not
                # on a CPU; the second prices the pass as this run measured it.
                a = r["acceptance_rate"]
                r["predicted_speedup"] = iid_speedup(a, r["k"], c)
                r["predicted_speedup_as_run"] = iid_speedup(a, r["k"], c, verify_ratio=v)
    _mark_divergence(records, runs)
    order = {name: i for i, name in enumerate(ALL_METHODS)}
    return sorted(records, key=lambda r: (r["category"] != "all", r["category"], r["temperature"],
                                          order.get(r["method"], 99), k_order(r["k"])))


def k_order(k) -> tuple:
    """None (k-less methods) first, then the numbers, then "auto"."""
    return (0, 0) if k is None else (2, 0) if k == "auto" else (1, k)


def _summarise(key: tuple, rs: list[dict]) -> dict:
    method, k, temperature, category = key
    tokens = sum(r["new_tokens"] for r in rs)
    total = sum(r["total_s"] for r in rs)
    itls = [x for r in rs for x in r["itl_s"]]
    drafted = sum(r["drafted_tokens"] or 0 for r in rs)
    accepted = sum(r["accepted_tokens"] or 0 for r in rs)
    passes = sum(r["target_passes"] or 0 for r in rs)
    dpp: list[int] = []
    app: list[int] = []
    for r in rs:
        dpp = metrics.add_counts(dpp, r["drafted_per_position"] or [])
        app = metrics.add_counts(app, r["accepted_per_position"] or [])
    engine = rs[0]["draft_s"] is not None

    def total_of(field):
        return sum(r[field] or 0.0 for r in rs) if engine else None

    tpots = [r["tpot_s"] for r in rs if r["tpot_s"] is not None]
    ttfts = [r["ttft_s"] for r in rs if r["ttft_s"] is not None]
    other = total - total_of("draft_s") - total_of("verify_s") - total_of("prefill_s") if engine else None
    # Decoding alone: the tokens after each run's first, over the time after it (pooled 1/TPOT). Prefill
    # costs every method alike, and at short outputs it hides what speculation does to generation.
    timed = [r for r in rs if r["ttft_s"] is not None]
    decode_s = sum(r["total_s"] - r["ttft_s"] for r in timed)
    decode_tokens = sum(max(r["new_tokens"] - 1, 0) for r in timed)
    return {
        "method": method,
        "backend": rs[0]["backend"],
        "k": k,
        "temperature": temperature,
        "category": category,
        "runs": len(rs),
        "concurrency": 1,
        "prompt_tokens_mean": float(np.mean([r["prompt_tokens"] for r in rs])),
        "output_tokens_mean": float(np.mean([r["new_tokens"] for r in rs])),
        "new_tokens": tokens,
        "total_s": total,
        "tokens_per_s": tokens / total if total > 0 else 0.0,
        "tokens_per_s_median": float(np.median([r["tokens_per_s"] for r in rs])),
        "decode_tokens_per_s": decode_tokens / decode_s if decode_s > 0 else None,
        **metrics.latency_summary(ttfts, itls, tpots),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_accepted_tokens": tokens / passes if passes else None,
        "per_position_acceptance": metrics.per_position(app, dpp),
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "target_passes": passes,
        "prefill_s": total_of("prefill_s"),
        "draft_s": total_of("draft_s"),
        "verify_s": total_of("verify_s"),
        "other_s": other,
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rs),
        "cuda_peak_bytes": max((r["cuda_peak_bytes"] or 0) for r in rs) or None,
        "tree": tree_summary(rs),
    }


def tree_summary(rs: list[dict]) -> dict | None:
    """Over the runs' tree passes: nodes scored and path tokens accepted per tree pass, how often
    the accepted token at a node was its first candidate (what a chain drafts) or another, and the
    share of drafting passes that scored a tree rather than a chain."""
    totals: dict[str, int] = defaultdict(int)
    for r in rs:
        for key, value in (r.get("tree") or {}).items():
            totals[key] += value
    if not totals.get("passes"):
        return None
    won = totals["first_candidate"] + totals["other_candidate"]
    return {"passes": totals["passes"], "nodes_per_pass": totals["nodes"] / totals["passes"],
            "accepted_per_pass": totals["accepted"] / totals["passes"],
            "other_candidate_share": totals["other_candidate"] / won if won else 0.0,
            "tree_pass_share": totals["passes"] / (totals["passes"] + totals.get("chain_passes", 0))}


def _mark_divergence(records: list[dict], runs: list[dict]) -> None:
    """For greedy runs: in how many did the output differ from plain's, and at which token."""
    plain = {(r["prompt_id"], r["turn"], r["repeat"]): r["token_ids"] for r in runs
             if r["method"] == "plain" and r["temperature"] == 0}
    diffs: dict[tuple, list[int | None]] = defaultdict(list)
    for r in runs:
        ref = plain.get((r["prompt_id"], r["turn"], r["repeat"]))
        if r["temperature"] != 0 or ref is None or r["method"] == "plain":
            continue
        at = next((i for i, (a, b) in enumerate(zip(r["token_ids"], ref)) if a != b), None)
        if at is None and len(r["token_ids"]) != len(ref):
            at = min(len(r["token_ids"]), len(ref))
        for category in (r["category"], "all"):
            diffs[(r["method"], r["k"], category)].append(at)
    for rec in records:
        d = diffs.get((rec["method"], rec["k"], rec["category"]))
        if rec["temperature"] != 0 or d is None:
            continue
        differing = [x for x in d if x is not None]
        rec["greedy_differs_from_plain"] = len(differing)
        rec["greedy_compared"] = len(d)
        rec["greedy_first_difference_mean"] = float(np.mean(differing)) if differing else None
