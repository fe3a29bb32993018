"""`specdecode demo`: the best configuration this installation offers, side by side with plain
decoding on the same prompts, and what to make of the numbers."""

from __future__ import annotations

from dataclasses import dataclass

from ..sampling.params import SamplingParams

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in three sentences what a hash map is.",
    "Rewrite this function with type hints and a docstring, keeping the code as it is:\n\n"
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n",
]


REFERENCE = "plain, llama.cpp target"


@dataclass
class DemoRow:
    prompt: int
    method: str
    text: str
    stats: dict
    speedup: float
    same_as_plain: bool
    first_difference: int | None


def run(gen, prompts: list[str], params: SamplingParams, proposer: str = "hybrid", k: int | str = "auto",
        on_row=None, reference=None) -> list[DemoRow]:
    """Per prompt: plain decoding, then the speculative configuration, each after the other so that
    the machine's drift falls on both alike; `reference`: another generator whose plain decoding is
    shown beside them (e.g. the same target on llama.cpp)."""
    rows = []
    for i, prompt in enumerate(prompts):
        plain = gen.generate(prompt, params, k=0, proposer="none")
        spec = gen.generate(prompt, params, k=k, proposer=proposer)
        runs = [("plain", plain), (f"{proposer} k={k}", spec)]
        if reference is not None:
            runs.append((REFERENCE, reference.generate(prompt, params, k=0, proposer="none")))
        for method, result in runs:
            diff = first_difference(result.token_ids, plain.token_ids)
            row = DemoRow(i + 1, method, result.text, result.stats,
                          result.stats["decode_tokens_per_s"] / max(plain.stats["decode_tokens_per_s"], 1e-9),
                          diff is None, diff)
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ, None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def summary(rows: list[DemoRow]) -> list[str]:
    """Where plain decoding on the llama.cpp target is faster than the speculative configuration, say
    so: the speedup over plain torch is not the fastest this machine offers."""
    notes = []
    for prompt in sorted({r.prompt for r in rows}):
        mine = {r.method: r for r in rows if r.prompt == prompt}
        ref = mine.get(REFERENCE)
        spec = next((r for m, r in mine.items() if m not in ("plain", REFERENCE)), None)
        if ref is not None and spec is not None and ref.speedup > spec.speedup:
            notes.append(f"prompt {prompt}: plain decoding on the llama.cpp target ({ref.speedup:.2f}x plain torch) "
                         f"beats speculation on the torch target ({spec.speedup:.2f}x) on this CPU; speculation "
                         "over the llama.cpp target does not pay here either (docs/performance.md)")
    return notes


def explain(row: DemoRow, dtype: str) -> list[str]:
    """One line for each thing a newcomer would ask about this row."""
    notes = []
    s = row.stats
    if row.method == REFERENCE:
        return notes
    if row.method != "plain" and row.speedup < 1.0:
        drafted_share = s["drafted_tokens"] / max(s["target_passes"], 1)
        if drafted_share < 0.5:
            notes.append(f"prompt {row.prompt}: k=auto drafted little here ({drafted_share:.1f} tokens per pass): "
                         "the drafts were not accepted often enough to pay for themselves, so it ran as plain "
                         f"decoding, {row.speedup:.2f}x within this machine's noise")
        else:
            notes.append(f"prompt {row.prompt}: {row.speedup:.2f}x: {s['acceptance_rate']:.0%} of the drafts were "
                         f"accepted ({s['mean_accepted_tokens']:.2f} tokens per pass), not enough for what a draft "
                         "token costs on this CPU (docs/choosing-k.md)")
    if not row.same_as_plain:
        notes.append(f"prompt {row.prompt}: the output parts from plain at token {row.first_difference}: in {dtype} "
                     "a batched verify pass and a one-token step round differently, so a near-tie can go either "
                     "way; both are greedy decodes of the target (--dtype float32 reproduces plain exactly)")
    return notes
