"""Where a pass's time goes: the engine's stages (StepRecord.stages), per pass and per emitted token.

The engine times each step's stages with one clock (plan, propose, score, verify, learn); what is left
of a request's wall time after its prefill and those stages is "other" (committing tokens, stop
checks, streaming, the step's bookkeeping). No profiler is attached, so the Python parts are not
inflated by it.
"""

from __future__ import annotations

from ..models.backends.dtype_choice import cpu_description
from ..sampling.params import SamplingParams

STAGES = ("plan", "propose", "score", "verify", "learn", "other")


def stage_profile(gen, prompts: list[str], params: SamplingParams, k: int | str, proposer: str | None = None,
                  chat: bool = True) -> dict:
    """Generate each prompt once (after one short warm-up) and add up the stages over every pass."""
    gen.generate(prompts[0], SamplingParams(max_new_tokens=4), k=k, proposer=proposer, chat=chat)
    seconds = dict.fromkeys(STAGES, 0.0)
    passes = tokens = 0
    prefill = 0.0
    for prompt in prompts:
        stats = gen.generate(prompt, params, k=k, proposer=proposer, chat=chat).stats
        for stage, s in stats["stage_s"].items():
            seconds[stage] += s
        seconds["other"] += max(0.0, stats["total_s"] - stats["prefill_s"] - sum(stats["stage_s"].values()))
        passes += stats["target_passes"]
        tokens += stats["new_tokens"]
        prefill += stats["prefill_s"]
    decode = sum(seconds.values())
    return {
        "machine": cpu_description(),
        "target": gen.info.get("target"), "draft": gen.info.get("draft"),
        "proposer": proposer or gen.default_proposer, "k": k, "prompts": len(prompts),
        "passes": passes, "tokens": tokens, "tokens_per_pass": tokens / passes if passes else 0.0,
        "prefill_s": prefill, "decode_tokens_per_s": tokens / decode if decode else 0.0,
        "ms_per_pass": {s: 1000 * v / passes for s, v in seconds.items()} if passes else {},
        "ms_per_token": {s: 1000 * v / tokens for s, v in seconds.items()} if tokens else {},
    }
