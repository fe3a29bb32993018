"""How far to speculate in one batched step: only as far as it pays for the whole batch.

Each row first picks its own k (fixed, or k="auto"'s choice). Over B > 1 rows the step's cap on
k is the one that maximises sum_b E_b(min(cap, k_b)) / cost(cap), with cost(cap) the B-row verify
pass at width 1 + cap plus cap batched draft steps and the draft model's catch-up on what its rows
missed (costs.best_k, the same rule k="auto" uses for one row). At one row the cap is the identity:
the row's own choice already is that maximum. k = 0 is plain decoding, so under heavy load or low
acceptance speculation turns itself off instead of slowing everyone down.
"""

from __future__ import annotations

from dataclasses import dataclass

from .costs import AcceptanceBound, AcceptanceTracker, PassCosts, best_k
from .knobs import LoadCapKnobs


@dataclass
class RowPlan:
    """What one row would draft this step, before the cap."""

    wanted: int  # its own k for this step (after max_new_tokens and context limits)
    acceptance: AcceptanceTracker | AcceptanceBound  # its acceptance by position (a tracker, or a reading of one)
    uses_draft_model: bool  # this step's drafts would come from the draft model
    behind: int = 0  # context tokens the draft model must process first (its catch-up)


class LoadPolicy:
    def __init__(self, costs: PassCosts, enabled: bool = True, knobs: LoadCapKnobs = LoadCapKnobs()):
        self.costs = costs
        self.enabled = enabled
        self.last_cap: int | None = None
        self.off_streak = 0
        self.probing = False  # the last cap was a probe: only rows that need no catch-up take it
        self.configure(knobs)

    def configure(self, knobs: LoadCapKnobs) -> None:
        """Take the numbers the cap runs on (EngineConfig.load_cap); the probe wait starts over."""
        # Over several rows speculate only when the best cap beats plain decoding by this fraction:
        # a step speculates when the rows' recent acceptance is high, which is partly luck that does
        # not carry into the next block (the optimiser's curse); see docs/choosing-k.md.
        self.margin = knobs.margin
        # While speculation is off nothing measures acceptance; after probe_every such steps one
        # step drafts a token so that a change in the traffic is noticed. A probe is not free (a
        # draft model first catches up on everything it missed), so each probe that does not turn
        # speculation back on doubles the wait, up to knobs.probe_wait_growth_limit times probe_every.
        self.probe_every = knobs.probe_every_off_steps
        self.wait_limit = knobs.probe_wait_growth_limit * self.probe_every
        self.wait = self.probe_every

    def cap(self, rows: list[RowPlan]) -> int:
        """The largest k any row may draft this step (rows keep their own smaller k)."""
        self.probing = False
        most = max((r.wanted for r in rows), default=0)
        if not self.enabled or len(rows) <= 1 or most == 0 or not self.costs.verify.points:
            self.last_cap = most
            return most
        best, _ = best_k(lambda cap: self.expected_tokens(rows, cap), lambda cap: self.step_cost(rows, cap), most,
                         self.margin)
        if best > 0:
            self.off_streak, self.wait = 0, self.probe_every
        else:
            self.off_streak += 1
            if self.probe_every and self.off_streak >= self.wait:
                best, self.off_streak, self.probing = 1, 0, True
                self.wait = min(2 * self.wait, self.wait_limit)
        self.last_cap = best
        return best

    @staticmethod
    def expected_tokens(rows: list[RowPlan], cap: int) -> float:
        return sum(r.acceptance.expected_tokens(min(cap, r.wanted)) for r in rows)

    def step_cost(self, rows: list[RowPlan], cap: int) -> float:
        width = 1 + max(min(cap, r.wanted) for r in rows)
        cost = self.costs.verify_seconds(len(rows), width)
        drafting = [r for r in rows if r.uses_draft_model and min(cap, r.wanted) > 0]
        if drafting:
            cost += max(min(cap, r.wanted) for r in drafting) * self.costs.draft_step(len(drafting))
            # A row whose draft model fell behind (or never started) is caught up first: charged
            # to the step that turns it on, so a switch must pay for itself.
            cost += self.costs.catch_up_seconds(sum(r.behind for r in drafting))
        return max(cost, 1e-9)
