"""`specdecode demo`: our default configuration beside the plain decoders a user would otherwise run,
on the same prompts, interleaved prompt by prompt, and what to make of the numbers. Every figure it
prints is measured in the run: speedups are over the fastest plain decoder of that prompt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..sampling.params import SamplingParams

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in three sentences what a hash map is.",
    "Rewrite this function with type hints and a docstring, keeping the code as it is:\n\n"
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n",
]


@dataclass
class Output:
    token_ids: list[int]
    text: str
    decode_tokens_per_s: float
    stats: dict | None = None  # ours: the engine's stats (acceptance, tokens per pass)


@dataclass
class Decoder:
    name: str
    plain: bool  # a plain decoder: a baseline the speculative rows are compared against
    run: Callable[[str, SamplingParams], Output]


@dataclass
class DemoRow:
    prompt: int
    method: str
    plain: bool
    output: Output
    speedup: float  # decode tokens/s over the fastest plain decoder on this prompt
    fastest_plain: str
    same_as_reference: bool  # the same tokens as our plain decoding over the same target
    first_difference: int | None


def engine_decoder(name: str, gen, plain: bool, proposer: str = "none", k: int | str = 0) -> Decoder:
    """Our engine, plain (proposer none) or speculative."""
    def run(prompt: str, params: SamplingParams) -> Output:
        result = gen.generate(prompt, params, k=k, proposer=proposer)
        return Output(result.token_ids, result.text, result.stats["decode_tokens_per_s"], result.stats)
    return Decoder(name, plain, run)


def llamacpp_decoder(name: str, gguf, gen) -> Decoder:
    """llama-cpp-python's own plain generation loop, sampler and threads on a GGUF file, fed the same
    chat-formatted prompt ids as our engine."""
    from ..bench import metrics
    from ..bench.methods import LlamaCppMethod
    from ..engine.prompts import chat_ids

    method = LlamaCppMethod("llamacpp", gguf, gen.eos_token_ids)

    def run(prompt: str, params: SamplingParams) -> Output:
        ids = chat_ids(gen.tokenizer, [{"role": "user", "content": prompt}])
        result = method.run(ids, params, None)
        per_token = metrics.tpot(result.total_s, metrics.ttft(result.steps) or result.total_s, len(result.token_ids))
        return Output(result.token_ids, gen.tokenizer.decode(result.token_ids, skip_special_tokens=True),
                      1 / per_token if per_token else 0.0)
    return Decoder(name, True, run)


def run(decoders: list[Decoder], prompts: list[str], params: SamplingParams, reference: str,
        on_row=None) -> list[DemoRow]:
    """Per prompt, every decoder one after the other (so the machine's drift falls on all alike);
    `reference`: the decoder whose tokens the others are compared with (our plain decoding)."""
    rows = []
    for i, prompt in enumerate(prompts):
        outputs = {}
        for decoder in decoders:
            outputs[decoder.name] = decoder.run(prompt, params)
        plain = {d.name: outputs[d.name].decode_tokens_per_s for d in decoders if d.plain}
        fastest = max(plain, key=plain.get)
        for decoder in decoders:
            out = outputs[decoder.name]
            diff = first_difference(out.token_ids, outputs[reference].token_ids)
            row = DemoRow(i + 1, decoder.name, decoder.plain, out, out.decode_tokens_per_s / max(plain[fastest], 1e-9),
                          fastest, diff is None, diff)
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ, None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def summary(rows: list[DemoRow], ours: str) -> list[str]:
    """What the run measured, in words: our configuration against the fastest plain decoder per
    prompt, and where it lost."""
    mine = [r for r in rows if r.method == ours]
    lines = [f"{ours}: " + ", ".join(f"{r.speedup:.2f}x" for r in mine) + " the fastest plain decoder's decode "
             "speed on the " + f"{len(mine)} prompts (fastest plain: "
             + ", ".join(sorted({r.fastest_plain for r in mine})) + ")"]
    for r in mine:
        if r.speedup < 1.0:
            lines.append(f"prompt {r.prompt}: {r.fastest_plain} was faster than {ours} here ({r.speedup:.2f}x)")
    return lines


def explain(row: DemoRow, numerics: str) -> list[str]:
    """One line for each thing a newcomer would ask about this row (numerics: the target's
    arithmetic, a torch dtype or a runtime's quantised kernels)."""
    notes = []
    s = row.output.stats
    if row.plain or s is None:
        return notes
    if row.speedup < 1.0:
        drafted_share = s["drafted_tokens"] / max(s["target_passes"], 1)
        if drafted_share < 0.5:
            notes.append(f"prompt {row.prompt}: k=auto drafted little here ({drafted_share:.1f} tokens per pass): "
                         "the drafts were not accepted often enough to pay for themselves, so it ran close to "
                         "plain decoding")
        else:
            notes.append(f"prompt {row.prompt}: {s['acceptance_rate']:.0%} of the drafts were accepted "
                         f"({s['mean_accepted_tokens']:.2f} tokens per pass), not enough for what drafting and "
                         "a wider pass cost on this CPU (docs/choosing-k.md)")
    if not row.same_as_reference:
        notes.append(f"prompt {row.prompt}: {row.method} parts from our plain decoding at token "
                     f"{row.first_difference}: in {numerics} a batched verify pass and a one-token step "
                     "round differently, so a near-tie can go either way; both are greedy decodes of the "
                     "target (a torch target in float32, --target hf:default --dtype float32, reproduces "
                     "plain exactly)")
    return notes
