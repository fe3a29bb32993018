"""Choosing k at run time (k="auto"): a cost rule, a controller, and a confidence stop.

All three only change which tokens are proposed, never how they are verified, so speculation stays
exact.
- The cost rule picks the k with the highest expected tokens per second given what passes really
  cost here (`PassCosts`, learnt from every pass) and this request's recent acceptance by position
  (c_j: draft j accepted given that the drafts before it were):
  rate(k) = (1 + c_1 + c_1 c_2 + ... + c_1...c_k) / (k * draft_token_s + verify(1 + k)). With an
  expensive draft (on a CPU the 0.5B draft costs 0.4-0.5 of a target pass) it holds k at 1-3 and
  moves it with the acceptance;
  with free n-gram drafts and a flat verify curve it drafts as far as the lookup reaches, where a
  rejection-driven controller would cut k after every miss and lose the rare long match; and it
  turns drafting off (k = 0, plain decoding, with a periodic one-token probe so that a change in
  the text is noticed) when no k beats plain decoding by `margin`.
- The controller follows transformers' assisted-generation heuristic (+2 after a fully accepted
  block, -1 after a rejection). It decides until the costs are known (the first pass), and alone
  where no cost rule applies (`auto_cost_cap = False`; the batched server, whose load policy
  caps k from batched costs).
- The draft stops early when its top probability for the next token falls below `min_confidence`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .load_policy import AcceptanceTracker, CostCurve, ema


class PassCosts:
    """Seconds per pass as this machine really runs them: the target's verify pass by width (a
    moving average per width) and each proposer's cost per drafted token."""

    def __init__(self, smoothing: float = 0.2):
        self.verify = CostCurve(smoothing=smoothing)
        self.per_draft: dict[str, float] = {}
        self.smoothing = smoothing

    def observe(self, proposer: str, drafted: int, draft_s: float, width: int, verify_s: float) -> None:
        self.verify.observe(width, verify_s)
        if drafted > 0:
            self.per_draft[proposer] = ema(self.per_draft.get(proposer), draft_s / drafted, self.smoothing)

    def known(self, proposer: str) -> bool:
        return bool(self.verify.points) and proposer in self.per_draft


@dataclass
class AdaptiveK:
    k_max: int = 8
    k: int = 4  # the controller's current allowance
    k_min: int = 1
    min_confidence: float = 0.4
    margin: float = 0.05  # speculate only when the best k beats plain decoding by this fraction
    probe_every: int = 16  # while the cost rule holds drafting off, draft one token this often
    acceptance: AcceptanceTracker = field(default_factory=AcceptanceTracker)
    off_streak: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.k_min <= self.k <= self.k_max:
            raise ValueError(f"need 1 <= k_min <= k <= k_max, got {self.k_min}, {self.k}, {self.k_max}")

    def update(self, drafted: int, accepted: int) -> None:
        """After a verification pass that checked `drafted` tokens and accepted `accepted`."""
        if drafted == 0:
            return
        self.acceptance.update(drafted, accepted)
        if accepted == drafted:
            # Only a block that used the whole allowance says the allowance was too small.
            if drafted >= self.k:
                self.k = min(self.k_max, self.k + 2)
        else:
            self.k = max(self.k_min, self.k - 1)

    def next_k(self, costs: PassCosts | None = None, proposer: str = "draft") -> int:
        """k for the next pass: what pays best at these costs, else the controller's allowance."""
        if costs is None or not costs.known(proposer):
            return self.k
        best = self.best_by_cost(costs.per_draft[proposer], costs.verify, self.acceptance)
        if best == 0:
            self.off_streak += 1
            if self.off_streak >= self.probe_every:
                self.off_streak = 0
                return 1
            return 0
        self.off_streak = 0
        return best

    def best_by_cost(self, draft_token_s: float, verify: CostCurve, acceptance: AcceptanceTracker) -> int:
        plain = 1.0 / max(verify(1), 1e-9)
        best, best_rate = 0, plain * (1 + self.margin)
        for k in range(1, self.k_max + 1):
            rate = acceptance.expected_tokens(k) / max(k * draft_token_s + verify(1 + k), 1e-9)
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = k, rate
        return best
