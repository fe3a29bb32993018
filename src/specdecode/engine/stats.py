"""What a request reports: per-pass records, totals, acceptance by position and by source."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class StepRecord:
    """One target pass: when it finished (seconds since the request began) and what it emitted."""

    end_s: float
    drafted: int
    accepted: int
    emitted: int
    # Seconds of each stage of the step this pass belonged to (plan, propose, score, verify, learn),
    # shared by the rows of the batch; `specdecode profile` reads them.
    stages: dict[str, float] = field(default_factory=dict)


class StageClock:
    """Seconds between laps, by stage name: the engine times its step's stages with it."""

    def __init__(self):
        self.stages: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.stages[stage] = now - self._last
        self._last = now

    def sum(self, *stages: str) -> float:
        return sum(self.stages[s] for s in stages)


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_passes: int = 0  # verification passes (the prefill is not counted)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    # Per position, the sum over passes of the chance that the pass accepted it: c_1 * ... * c_i with
    # c_j = min(1, p(x_j) / q(x_j)) for the drafted x_j. It has the expectation of the realised
    # counts above (the uniforms of the rejection step integrated out) and, sampling, far less noise,
    # and it counts positions after the first rejection too: what `tune` builds its predictions on.
    expected_per_position: list[float] = field(default_factory=list)
    # Source -> [passes, drafted, accepted]: the draft model, the lookup's match lengths (ngram3/2/1),
    # or none (a pass that drafted nothing).
    by_source: dict[str, list[int]] = field(default_factory=dict)
    # Tree passes (verification/tree.py): passes, nodes scored, accepted path tokens, and which candidate won at
    # each accepted node: the first child of its parent (what a chain would have drafted) or another.
    # chain_passes: passes of a tree request that scored a chain (the proposer found no second
    # candidate, or the cost rule judged no branch worth the wider pass).
    tree: dict[str, int] = field(default_factory=lambda: {"passes": 0, "nodes": 0, "accepted": 0,
                                                           "first_candidate": 0, "other_candidate": 0,
                                                           "chain_passes": 0})
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    ttft_s: float = 0.0
    steps: list[StepRecord] = field(default_factory=list)

    def record_pass(self, drafted: int, accepted: int, draft_s: float, verify_s: float,
                    chances: Sequence[float] = (), source: str | None = None, levels: int | None = None) -> None:
        """One verification pass that checked `drafted` tokens and accepted `accepted`; chances:
        each draft's min(1, p/q), when known; source: the proposer that drafted them; levels: the
        positions they covered (a tree's depth; a chain's is its length), which the per-position
        counts are kept by."""
        if source is not None:
            counts = self.by_source.setdefault(source, [0, 0, 0])
            counts[0] += 1
            counts[1] += drafted
            counts[2] += accepted
        self.draft_s += draft_s
        self.verify_s += verify_s
        self.target_passes += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        if levels is not None:
            drafted = levels
        while len(self.drafted_per_position) < drafted:
            self.drafted_per_position.append(0)
            self.accepted_per_position.append(0)
            self.expected_per_position.append(0.0)
        reach = 1.0
        for i in range(drafted):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += int(i < accepted)
            reach *= chances[i] if len(chances) == drafted else float(i < accepted)
            self.expected_per_position[i] += reach

    def record_tree(self, parents: Sequence[int], path: Sequence[int]) -> None:
        """One tree pass: its nodes, and the candidate rank of each accepted node among its siblings."""
        t = self.tree
        t["passes"] += 1
        t["nodes"] += len(parents)
        t["accepted"] += len(path)
        for node in path:
            first = next(i for i, parent in enumerate(parents) if parent == parents[node])
            t["first_candidate" if first == node else "other_candidate"] += 1

    def stage_seconds(self) -> dict[str, float]:
        """Each step stage's seconds summed over this request's passes (StepRecord.stages)."""
        total: dict[str, float] = {}
        for step in self.steps:
            for stage, seconds in step.stages.items():
                total[stage] = total.get(stage, 0.0) + seconds
        return total

    def as_dict(self) -> dict:
        decode_s = self.total_s - self.ttft_s
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "target_passes": self.target_passes,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0,
            "mean_accepted_tokens": self.new_tokens / self.target_passes if self.target_passes else 0.0,
            "per_position_acceptance": [
                a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)
            ],
            "drafted_per_position": list(self.drafted_per_position),
            "accepted_per_position": list(self.accepted_per_position),
            "expected_per_position": list(self.expected_per_position),
            "by_source": {s: list(c) for s, c in self.by_source.items()},
            "tree": dict(self.tree),
            "tokens_per_s": self.new_tokens / self.total_s if self.total_s > 0 else 0.0,
            "decode_tokens_per_s": (self.new_tokens - 1) / decode_s if decode_s > 0 and self.new_tokens > 1 else 0.0,
            "ttft_s": self.ttft_s,
            "prefill_s": self.prefill_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "other_s": max(0.0, self.total_s - self.prefill_s - self.draft_s - self.verify_s),
            "stage_s": self.stage_seconds(),
            "total_s": self.total_s,
            "steps": [[round(s.end_s, 6), s.drafted, s.accepted, s.emitted] for s in self.steps],
        }


@dataclass
class GenerationOutput:
    text: str
    token_ids: list[int]
    stats: dict
    prompt_token_ids: list[int]
    finish_reason: str
    logprobs: list | None = None  # logprobs.TokenLogprob per token, when asked for
