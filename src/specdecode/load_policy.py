"""How far to speculate in one batched step: only as far as it pays for the whole batch.

A pass over B rows that each score 1 + k tokens costs about verify(B * (1 + k)) on a CPU (and
almost verify(B) on a GPU until the batch is compute-bound); drafting costs k draft passes over the
draft rows. Row b emits E_b(k) = 1 + c_1 + c_1 c_2 + ... + c_1...c_k tokens on average, c_j its
recent acceptance at draft position j given that the drafts before it were accepted. The step's cap
on k is the one that maximises sum_b E_b(k) / cost(k); k = 0 is plain decoding, so under heavy load
or low acceptance speculation turns itself off instead of slowing everyone down. Costs start from a
short one-row calibration and follow every real pass (moving averages keyed by rows and width; a
width not yet seen at B rows is the one-row curve scaled by what B-row passes cost against it), so
the policy adapts to the machine it runs on and its load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def ema(old: float | None, new: float, smoothing: float) -> float:
    """Exponential moving average of measured costs; the first measurement is taken as it is."""
    return new if old is None else (1 - smoothing) * old + smoothing * new


class CostCurve:
    """Seconds of one forward pass as a function of the tokens in it (rows x padded width)."""

    def __init__(self, points: dict[int, float] | None = None, smoothing: float = 0.2):
        self.points: dict[int, float] = dict(points or {})
        self.smoothing = smoothing

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        self.points[tokens] = ema(self.points.get(tokens), seconds, self.smoothing)

    def __call__(self, tokens: float) -> float:
        if not self.points:
            return 0.0
        xs = sorted(self.points)
        ys = [self.points[x] for x in xs]
        if tokens > xs[-1] and len(xs) > 1:  # extrapolate with the slope of the last two points
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            return ys[-1] + slope * (tokens - xs[-1])
        return float(np.interp(tokens, xs, ys))


@dataclass
class RowPlan:
    """What one row would draft this step, before the cap."""

    wanted: int  # its own k for this step (after max_new_tokens and context limits)
    acceptance: AcceptanceTracker  # its recent acceptance by position
    uses_draft_model: bool


class LoadPolicy:
    def __init__(self, verify: CostCurve, draft: CostCurve | None = None, enabled: bool = True,
                 probe_every: int = 32, smoothing: float = 0.2, margin: float = 0.05, batch_margin: float = 0.15):
        self.verify = verify  # one row, by tokens scored: the calibration refined by one-row passes
        self.draft = draft or CostCurve()
        # A pass over B rows costs more than one row of the same number of tokens (attention over
        # B caches, B rejection steps), so real passes are also kept by (rows, width), and the
        # tokens curve is scaled for B by what passes over B rows really cost against it.
        self.observed: dict[tuple[int, int], float] = {}
        self.correction: dict[int, float] = {}
        self.smoothing = smoothing
        # Speculate only when the best cap beats plain decoding by this fraction: the costs are
        # estimates, and a near-tie is not worth the risk of being slower than plain. Over several
        # rows the margin is wider. The step speculates when the rows' recent acceptance is high,
        # which is partly luck that does not carry into the next block (the optimiser's curse);
        # profiled at 4 rows on a CPU, steps the policy chose with a 5% margin came out between
        # -5% and +1% against plain steps.
        self.margin = margin
        self.batch_margin = batch_margin
        self.enabled = enabled
        self.last_cap: int | None = None
        # While speculation is off nothing measures acceptance; every probe_every-th such step
        # drafts one token so that a change in the traffic is noticed.
        self.probe_every = probe_every
        self.off_streak = 0

    def cap(self, rows: list[RowPlan]) -> int:
        """The largest k any row may draft this step (rows keep their own smaller k)."""
        most = max((r.wanted for r in rows), default=0)
        if not self.enabled or most == 0 or not self.verify.points:
            self.last_cap = most
            return most
        plain_rate = self.expected_tokens(rows, 0) / self.step_cost(rows, 0)
        margin = self.margin if len(rows) == 1 else self.batch_margin
        best, best_rate = 0, plain_rate * (1 + margin)
        for cap in range(1, most + 1):
            rate = self.expected_tokens(rows, cap) / self.step_cost(rows, cap)
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = cap, rate
        self.off_streak = self.off_streak + 1 if best == 0 else 0
        if self.probe_every and self.off_streak >= self.probe_every:
            best, self.off_streak = 1, 0
        self.last_cap = best
        return best

    @staticmethod
    def expected_tokens(rows: list[RowPlan], cap: int) -> float:
        return sum(r.acceptance.expected_tokens(min(cap, r.wanted)) for r in rows)

    def observe_verify(self, rows: int, width: int, seconds: float) -> None:
        """Book one real batched pass (scoring and rejection) of rows x width tokens."""
        if rows <= 0 or width <= 0 or seconds <= 0:
            return
        self.observed[(rows, width)] = ema(self.observed.get((rows, width)), seconds, self.smoothing)
        if rows == 1:
            self.verify.observe(width, seconds)
            return
        # Against the one-row curve only: were multi-row passes booked in it too, the ratio would
        # drift to 1 as the curve learnt them.
        predicted = self.verify(rows * width)
        if predicted > 0:
            self.correction[rows] = ema(self.correction.get(rows), seconds / predicted, self.smoothing)

    def verify_seconds(self, rows: int, width: int) -> float:
        seen = self.observed.get((rows, width))
        if seen is not None:
            return seen
        return self.verify(rows * width) * self.correction.get(rows, 1.0)

    def step_cost(self, rows: list[RowPlan], cap: int) -> float:
        width = 1 + max(min(cap, r.wanted) for r in rows)
        cost = self.verify_seconds(len(rows), width)
        drafting = [r for r in rows if r.uses_draft_model and min(cap, r.wanted) > 0]
        if drafting:
            cost += max(min(cap, r.wanted) for r in drafting) * self.draft(len(drafting))
        return max(cost, 1e-9)


class AcceptanceTracker:
    """A row's recent acceptance by draft position: c_j, the chance that draft j is accepted when
    the drafts before it were. One average rate hides how drafts behave: n-gram drafts are rejected
    at the first position most of the time, yet once the first one matches the next ones usually
    do too, and that is what makes long n-gram drafts pay. Counts are exponentially decayed so that
    they follow the text as it changes; a position decays only when it is judged, so positions a
    row seldom reaches keep what is known of them (the prior: the proposer's pooled acceptance)."""

    def __init__(self, prior: float | Sequence[float] = 0.5, weight: float = 4.0, decay: float = 0.9,
                 positions: int = 32):
        self.accepted = np.broadcast_to(np.asarray(prior, dtype=float), (positions,)) * weight
        self.judged = np.full(positions, float(weight))
        self.decay = decay
        # All positions together, decayed every pass: the recent average rate (`rate`; tests and
        # debugging read it, the policies use the per-position counts).
        self.overall = [float(self.accepted[0]), float(weight)]

    def update(self, drafted: int, accepted: int, chances: Sequence[float] | None = None) -> None:
        """Count one pass. With `chances` (each draft's min(1, p/q), one per draft) the pass counts
        what it was expected to accept rather than what the sampler's coin gave: position i is
        reached with the product of the chances before it and accepted with that product times its
        own. Same expectation as the 0/1 counts (identical when greedy), far less noise when
        sampling, where a few unlucky coins otherwise swing a request's c_j and k=auto with it."""
        if drafted == 0:
            return
        n = min(drafted, len(self.judged))
        if chances is not None and len(chances) == drafted:
            c = np.clip(np.asarray(chances[:n], dtype=float), 0.0, 1.0)
            passed = np.cumprod(c)
            reach = np.concatenate(([1.0], passed[:-1]))
        else:
            reached = min(accepted + (1 if accepted < drafted else 0), n)  # a rejection ends a block
            reach = (np.arange(n) < reached).astype(float)
            passed = (np.arange(n) < min(accepted, reached)).astype(float)
        # A position decays by how much it was judged, so one a pass barely reached keeps its memory.
        fade = self.decay ** reach
        self.accepted[:n] = self.accepted[:n] * fade + passed
        self.judged[:n] = self.judged[:n] * fade + reach
        self.overall = [self.decay * self.overall[0] + float(passed.sum()),
                        self.decay * self.overall[1] + float(reach.sum())]

    @property
    def conditional(self) -> np.ndarray:
        """c_j for every position j (0-based)."""
        return np.divide(self.accepted, self.judged, out=np.zeros_like(self.accepted), where=self.judged > 0)

    def expected_tokens(self, k: int) -> float:
        """Tokens one pass of k drafts emits on average: 1 + sum over i <= k of c_1 * ... * c_i."""
        return 1.0 + float(np.cumprod(np.minimum(self.conditional[:k], 0.999)).sum())

    @property
    def rate(self) -> float:
        """Recent accepted over judged drafts, all positions together."""
        return self.overall[0] / self.overall[1] if self.overall[1] > 0 else 0.0
