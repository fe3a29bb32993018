"""Choosing k at run time (k="auto"): a cost rule, a controller, and a confidence stop.

All three only change which tokens are proposed, never how they are verified, so speculation stays
exact.
- The cost rule picks the k with the highest expected tokens per second given what passes really
  cost here (`PassCosts`, learnt from every pass) and this request's recent acceptance by position
  (c_j: draft j accepted given that the drafts before it were; counted from each draft's chance
  min(1, p/q) rather than the sampler's coin, see AcceptanceTracker.update):
  rate(k) = (1 + c_1 + c_1 c_2 + ... + c_1...c_k) / (k * draft_token_s + verify(1 + k)) (policy/costs.py).
  With an expensive draft it holds k short and moves it with the acceptance;
  with free n-gram drafts and a flat verify curve it drafts as far as the lookup reaches, where a
  rejection-driven controller would cut k after every miss and lose the rare long match; and it
  turns drafting off (k = 0, plain decoding, with a periodic probe so that a change in the text is
  noticed, aimed at the source that could pay were its acceptance at the top of its plausible
  range) when no k beats plain decoding (by `margin`, none by default).
- With several sources (the lookup's match lengths; for the hybrid proposer also the draft model)
  each has its own rule, and a pass drafts from the source whose best k promises most
  (`SourceChoice`).
- The controller follows transformers' assisted-generation heuristic (+2 after a fully accepted
  block, -1 after a rejection). It decides until the costs are known (the first pass), and alone
  where no cost rule applies (EngineConfig.cost_rule off).
- The draft drafts no further after a position where its top probability was below
  `min_confidence` (the token drafted there is kept: its forward pass is paid for, and dropping it
  would bias the drafts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .costs import AcceptanceBound, AcceptanceTracker, CostCurve, DraftPrice, PassCosts, best_k, pass_seconds
from .knobs import AutoKKnobs


@dataclass
class AdaptiveK:
    """One source's rule: its acceptance by position, the controller's allowance, and the cost rule."""

    k_max: int = AutoKKnobs.k_max
    k: int = AutoKKnobs.k_start  # the controller's current allowance
    k_min: int = 1
    min_confidence: float = AutoKKnobs.min_confidence
    grow: int = AutoKKnobs.grow_after_full_block
    shrink: int = AutoKKnobs.shrink_after_rejection
    # Speculate only when the best k beats plain decoding by this fraction. None by default: for
    # one request a wrong "on" and a wrong "off" cost alike, and a margin turns a draft that pays
    # little off after every unlucky run of rejections (docs/choosing-k.md).
    margin: float = 0.0
    acceptance: AcceptanceTracker = field(default_factory=AcceptanceTracker)

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k <= k_max, got {self.k_min}, {self.k}, {self.k_max}")

    def update(self, drafted: int, accepted: int, chances: Sequence[float] | None = None) -> None:
        """After a verification pass that checked `drafted` tokens and accepted `accepted`; the
        acceptance counts each draft's chance where given (see AcceptanceTracker.update), the
        controller what happened."""
        if drafted == 0:
            return
        self.acceptance.update(drafted, accepted, chances)
        if accepted == drafted:
            # Only a block that used the whole allowance says the allowance was too small.
            if drafted >= self.k:
                self.k = min(self.k_max, self.k + self.grow)
        else:
            self.k = max(self.k_min, self.k - self.shrink)

    def best(self, draft: DraftPrice, verify: CostCurve, acceptance: AcceptanceTracker | AcceptanceBound,
             k_max: int | None = None) -> tuple[int, float]:
        """(k, expected tokens/s) of the k that pays best, k = 0 (plain decoding) when none beats it
        by the margin (costs.best_k)."""
        return best_k(acceptance.expected_tokens, lambda k: pass_seconds(verify, draft, k),
                      min(self.k_max, k_max or self.k_max), self.margin)

    def best_by_cost(self, draft: DraftPrice, verify: CostCurve, acceptance: AcceptanceTracker) -> int:
        return self.best(draft, verify, acceptance)[0]


@dataclass
class SourceChoice:
    """k="auto" for one request: which source drafts the next pass, and how far.

    The draft model is one source; the lookup is one per match length (ngram3, ngram2, ngram1);
    the hybrid has all four. Each has its own rule, acceptance and cost per token. Every pass
    drafts from the source whose best k promises the most tokens per second at the measured costs
    (the lookup only where it matches); a source whose cost is not measured yet drafts at its
    controller's allowance so that it gets measured. When no source beats plain decoding, drafting
    is off, with a probe every `probe_every` passes so that a change in the text is noticed: from
    the source that could pay most were its acceptance at the top of its plausible range
    (`optimism` standard deviations up: little evidence, or estimates near paying), at the k that
    would pay then, or one token from the sources in turn when none could.
    """

    rules: dict[str, AdaptiveK]
    probe_every: int = AutoKKnobs.probe_every_off_passes
    optimism: float = AutoKKnobs.probe_optimism
    off_streak: int = 0
    probes: int = 0

    @property
    def min_confidence(self) -> float:
        return min(rule.min_confidence for rule in self.rules.values())

    def update(self, source: str, drafted: int, accepted: int, chances: Sequence[float] | None = None) -> None:
        self.rules[source].update(drafted, accepted, chances)

    def choose(self, costs: PassCosts | None, available: dict[str, int]) -> tuple[str, int]:
        """(source, k) for the next pass; `available`: how many tokens each source could draft."""
        options = []
        for source, reach in available.items():
            rule = self.rules[source]
            if reach <= 0:
                continue
            if costs is None or not costs.known(source):
                return source, min(rule.k, reach)
            k, rate = rule.best(costs.draft_price(source), costs.verify, rule.acceptance, reach)
            options.append((rate, k, source))
        if not options:
            return next(iter(available)), 0
        rate, k, source = max(options)
        if k > 0:
            self.off_streak = 0
            return source, k
        self.off_streak += 1
        if self.off_streak < self.probe_every:
            return source, 0
        self.off_streak = 0
        self.probes += 1
        return self.probe(costs, available, options)

    def probe(self, costs: PassCosts, available: dict[str, int], options: list) -> tuple[str, int]:
        """(source, k) of a probe: the source whose best k pays most at its optimistic acceptance
        (a lookup with a long match that has been judged little, rather than a draft model known
        not to pay), at that k, so that one probe judges every position the hope rests on; with
        no source that could pay even so, one token from the sources in turn."""
        hopes = []
        for _, _, source in options:
            rule = self.rules[source]
            k, rate = rule.best(costs.draft_price(source), costs.verify, rule.acceptance.optimistic(self.optimism),
                                available[source])
            if k > 0:
                hopes.append((rate, k, source))
        if hopes:
            _, k, source = max(hopes)
            return source, k
        return options[self.probes % len(options)][2], 1
