"""The one cost and acceptance model: what passes cost here, how often drafts are accepted, and
which proposal length pays.

A pass that scores w tokens over B rows costs verify(B, w); drafting k tokens costs k draft steps.
A row whose recent acceptance at draft position j (given that the drafts before it were accepted)
is c_j emits E(k) = 1 + c_1 + c_1 c_2 + ... + c_1...c_k tokens per pass on average. The best k
maximises E(k) / cost(k); k = 0 is plain decoding. k="auto" for one row, the load cap over many
rows and `tune`'s predictions all use `best_k` and `expected_tokens` from here.

Costs are learnt from every real pass (moving averages). Passes over B > 1 rows are kept by
(rows, width); a width not yet seen at B rows is the one-row curve scaled by what B-row passes have
cost against it, since a B-row pass costs more than one row of the same number of tokens
(attention over B caches, B rejection steps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .knobs import AcceptanceKnobs


def ema(old: float | None, new: float, smoothing: float) -> float:
    """Exponential moving average of measured costs; the first measurement is taken as it is."""
    return new if old is None else (1 - smoothing) * old + smoothing * new


def expected_tokens(conditional: Sequence[float], k: int) -> float:
    """Tokens one pass of k drafts emits on average: 1 + sum over i <= k of c_1 * ... * c_i.
    Each c is capped below 1, so that a perfect record never makes an unbounded k look free."""
    c = np.minimum(np.asarray(conditional[:k], dtype=float), 0.999)
    return 1.0 + float(np.cumprod(c).sum())


def iid_expected_tokens(rate: float, k: int) -> float:
    """expected_tokens when every draft is accepted with the same chance `rate`, uncapped (the closed
    form of Leviathan et al. 2023: (1 - a^(k+1)) / (1 - a); k + 1 at a = 1)."""
    a = min(max(rate, 0.0), 1.0)
    return k + 1.0 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)


def iid_speedup(rate: float, k: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Speedup over plain decoding at an i.i.d. acceptance `rate`, k drafts a pass, each costing
    `cost_ratio` one-token passes, and a verify pass that costs `verify_ratio` one-token passes.
    At 1 (a verify pass costs one token's at any width) it is Leviathan et al. 2023, Theorem 3.8:
    the bench's "predicted" column and `plan`'s reference; the bench's "as run" passes the
    measured ratio."""
    return iid_expected_tokens(rate, k) / pass_seconds(CostCurve({1: verify_ratio}), cost_ratio, k)


DraftPrice = float | Callable[[int], float]  # seconds a drafted token, or drafting k tokens as a function of k


def pass_seconds(verify: "CostCurve", draft: DraftPrice, k: int) -> float:
    """One row's pass with k drafts: drafting them (k times a price a token, or a DraftCost's k) and
    the verify pass over 1 + k tokens."""
    drafting = (draft(k) if k > 0 else 0.0) if callable(draft) else k * draft
    return drafting + verify(1 + k)


def best_k(tokens: Callable[[int], float], cost: Callable[[int], float], k_max: int,
           margin: float = 0.0) -> tuple[int, float]:
    """(k, expected tokens/s) of the k in 0..k_max with the highest tokens(k) / cost(k); k = 0
    (plain decoding) unless some k beats it by `margin`."""
    plain = tokens(0) / max(cost(0), 1e-9)
    best, best_rate = 0, plain * (1 + margin)
    for k in range(1, k_max + 1):
        rate = tokens(k) / max(cost(k), 1e-9)
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = k, rate
    return best, (best_rate if best else plain)


def best_k_at_rate(rate: float, draft_token_s: float, verify: "CostCurve", k_max: int) -> tuple[int, float]:
    """best_k when every drafted position is accepted with chance `rate` given the ones before it:
    how a measured draft (or target runtime) is priced before any real pass has run."""
    return best_k(lambda k: expected_tokens([rate] * k, k), lambda k: pass_seconds(verify, draft_token_s, k), k_max)


class CostCurve:
    """Seconds of one forward pass as a function of the tokens in it (rows x padded width).

    Learnt as the machine's speed times the curve's shape: a pass moves the estimate at its own
    width (a moving average), and every other width by the `shared` part of the same move. A
    shared machine's speed drifts by tens of percent within minutes, for passes of every width
    alike, while most passes have one width (one token, when drafting is off): a width seldom run
    would otherwise keep the speed of long ago, and one that looked dear then (one-token passes got
    faster, two-token ones were not run again) stays dear and unrun: drafting is turned off for good.
    """

    def __init__(self, points: dict[int, float] | None = None, smoothing: float = 0.2, shared: float = 0.8):
        self.points: dict[int, float] = dict(points or {})
        self.smoothing = smoothing
        self.shared = shared

    def observe(self, tokens: int, seconds: float) -> float:
        """Book a pass; returns the factor every other width moved by (1 for a width's first pass,
        which says nothing about a change of speed)."""
        if tokens <= 0 or seconds <= 0:
            return 1.0
        old = self.points.get(tokens)
        self.points[tokens] = ema(old, seconds, self.smoothing)
        if old is None:
            return 1.0
        drift = (self.points[tokens] / old) ** self.shared
        for width in self.points:
            if width != tokens:
                self.points[width] *= drift
        return drift

    def __call__(self, tokens: float) -> float:
        if not self.points:
            return 0.0
        xs = sorted(self.points)
        ys = [self.points[x] for x in xs]
        if tokens > xs[-1] and len(xs) > 1:  # extrapolate with the slope of the last two points
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            return ys[-1] + slope * (tokens - xs[-1])
        return float(np.interp(tokens, xs, ys))


class DraftCost:
    """Seconds one row's pass spends drafting k tokens from one source, learnt by k (a moving average
    of each k drafted) and read as a fixed part plus a part a token: a + b k, fitted by least squares
    over the k drafted so far.

    A draft model's pass pays something whatever it drafts (its first step also takes the tokens the
    last pass kept, its cache is cut back, the sampler and the shortlist run), so the price of one
    token at k = 1 overprices every deeper k: priced a token at a time, a k=auto that drafts one
    token never learns that the next ones cost less, and stays at k = 1. With one k seen, the line
    goes through it with the slope `step` (one forward step of the draft alone, as measured when it
    was chosen), where that is known and not dearer, else through the origin; where a fit over
    several k would fall, or cost less than nothing at k = 0 (noise between close k), the
    proportional fit through the origin is used."""

    def __init__(self, smoothing: float = 0.2, step: float | None = None):
        self.points: dict[int, float] = {}
        self.smoothing = smoothing
        self.step = step

    def observe(self, k: int, seconds: float) -> None:
        if k > 0 and seconds > 0:
            self.points[k] = ema(self.points.get(k), seconds, self.smoothing)

    def scale(self, factor: float) -> None:
        """The machine's speed moved by `factor` (see CostCurve): every k moves with it."""
        for k in self.points:
            self.points[k] *= factor
        if self.step is not None:
            self.step *= factor

    def line(self) -> tuple[float, float]:
        """(a, b): drafting k tokens costs a + b k."""
        if not self.points:
            return 0.0, self.step or 0.0
        ks = np.array(list(self.points), dtype=float)
        ys = np.array(list(self.points.values()))
        if len(ks) >= 2:
            b, a = np.polyfit(ks, ys, 1)
            if a >= 0 and b > 0:
                return float(a), float(b)
        elif self.step is not None and self.step * ks[0] <= ys[0]:
            return float(ys[0] - self.step * ks[0]), self.step
        return 0.0, float((ks * ys).sum() / (ks * ks).sum())

    def __call__(self, k: int) -> float:
        a, b = self.line()
        return a + b * k if k > 0 else 0.0


class CatchUpPrice:
    """Seconds a draft model takes to process n context tokens it has not seen before it can draft,
    learnt per size class (n rounded to a power of two). The price a token is not one number: a few
    tokens ride on a drafting step almost free, while a prompt costs the draft's prefill rate, which
    grows with the context. A size not yet measured is priced at the rate of the nearest measured
    class (the larger on a tie, the dearer as a rule), so a long prompt is not priced at what short
    catch-ups cost."""

    def __init__(self, smoothing: float = 0.2):
        self.rates: dict[int, float] = {}  # size class -> seconds a token
        self.smoothing = smoothing

    @staticmethod
    def size_class(tokens: int) -> int:
        return round(float(np.log2(max(tokens, 1))))

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds > 0:
            c = self.size_class(tokens)
            self.rates[c] = ema(self.rates.get(c), seconds / tokens, self.smoothing)

    def __call__(self, tokens: int) -> float:
        if not self.rates or tokens <= 0:
            return 0.0
        c = self.size_class(tokens)
        nearest = min(self.rates, key=lambda m: (abs(m - c), -m))
        return tokens * self.rates[nearest]

    def __bool__(self) -> bool:
        return bool(self.rates)


class PassCosts:
    """Seconds per pass as this machine really runs them.

    verify: the one-row target pass by width; observed / correction: passes over several rows;
    per_draft: each source's cost per drafted token at one row (a batched draft step's price until
    one is timed; a source's whole price where no DraftCost learns it); drafting: each source's cost
    of k drafted tokens at one row (k=auto); draft: one batched draft step by the number of rows
    drafting; catch_up: what a draft model pays to process the context tokens it has
    not seen before it can draft for a row (its prefill of a new row, or what it missed while not
    drafting), by how many they are."""

    def __init__(self, smoothing: float = 0.2):
        self.verify = CostCurve(smoothing=smoothing)
        self.draft = CostCurve(smoothing=smoothing)
        self.per_draft: dict[str, float] = {}
        self.drafting: dict[str, DraftCost] = {}
        self.observed: dict[tuple[int, int], float] = {}
        self.correction: dict[int, float] = {}
        self.catch_up = CatchUpPrice(smoothing)
        self.smoothing = smoothing

    def observe(self, proposer: str, drafted: int, draft_s: float, width: int, verify_s: float) -> None:
        """One pass of one row: `drafted` tokens from `proposer` in draft_s, scored in verify_s. The
        sources that did not draft move with the machine's speed as the verify curve's other widths
        do: a draft model off for a while is priced at today's speed, not at when it last drafted."""
        drift = self.verify.observe(width, verify_s)
        for source in self.per_draft:
            if source != proposer or drafted == 0:
                self.per_draft[source] *= drift
                if source in self.drafting:
                    self.drafting[source].scale(drift)
        if drafted > 0:
            self.per_draft[proposer] = ema(self.per_draft.get(proposer), draft_s / drafted, self.smoothing)
            self.drafting.setdefault(proposer, DraftCost(self.smoothing)).observe(drafted, draft_s)

    def draft_price(self, source: str) -> DraftPrice:
        """What drafting k tokens from `source` costs at one row: learnt by k (DraftCost) once it
        has drafted in a real pass or was seeded (seed_draft), else its price a token."""
        return self.drafting[source] if source in self.drafting else self.per_draft[source]

    def seed_draft(self, source: str, step_s: float) -> None:
        """Price `source` before it drafts: one forward step of it measured alone (`--draft auto`),
        which is also the slope DraftCost starts from once its first pass is timed."""
        self.per_draft.setdefault(source, step_s)
        self.drafting.setdefault(source, DraftCost(self.smoothing, step=step_s))

    def observe_batch(self, rows: int, width: int, seconds: float) -> None:
        """One pass over `rows` rows padded to `width` (scoring and rejection)."""
        if rows <= 1 or width <= 0 or seconds <= 0:
            return
        self.observed[(rows, width)] = ema(self.observed.get((rows, width)), seconds, self.smoothing)
        # Against the one-row curve only: were multi-row passes booked in it too, the ratio would
        # drift to 1 as the curve learnt them.
        predicted = self.verify(rows * width)
        if predicted > 0:
            self.correction[rows] = ema(self.correction.get(rows), seconds / predicted, self.smoothing)

    def observe_catch_up(self, tokens: int, seconds: float) -> None:
        self.catch_up.observe(tokens, seconds)

    def catch_up_seconds(self, tokens: int) -> float:
        """What a draft model pays to process `tokens` context tokens first (0 until measured)."""
        return self.catch_up(tokens)

    def known(self, proposer: str) -> bool:
        return bool(self.verify.points) and proposer in self.per_draft

    def verify_seconds(self, rows: int, width: int) -> float:
        if rows <= 1:
            return self.verify(width)
        seen = self.observed.get((rows, width))
        if seen is not None:
            return seen
        return self.verify(rows * width) * self.correction.get(rows, 1.0)

    def draft_step(self, rows: int) -> float:
        """One batched draft position over `rows` rows."""
        if self.draft.points:
            return self.draft(rows)
        return self.per_draft.get("draft", 0.0) * rows


class AcceptanceTracker:
    """A row's recent acceptance by draft position: c_j, the chance that draft j is accepted when
    the drafts before it were. One average rate hides how drafts behave: n-gram drafts are rejected
    at the first position most of the time, yet once the first one matches the next ones usually
    do too, and that is what makes long n-gram drafts pay. Counts are exponentially decayed so that
    they follow the text as it changes; a position decays only when it is judged, so positions a
    row seldom reaches keep what is known of them (the prior: the proposer's pooled acceptance).

    A position with no prior of its own (a flat prior, or one the pooled tracker never judged)
    borrows the position before it: its prior is the larger of the flat one and c_(j-1), and its
    own counts take over as it is judged. Absent evidence, a draft that has been right so far is
    taken to go on being right: what k=auto does not draft it never judges, so with a flat prior
    at the deeper positions a lookup accepted 96% of the time at the first two would be held at
    k = 2 for good, however long its matches."""

    def __init__(self, prior: float | Sequence[float] = AcceptanceKnobs.prior, weight: float = AcceptanceKnobs.prior_weight,
                 decay: float = AcceptanceKnobs.row_decay,
                 positions: int = 32, borrows: Sequence[bool] | None = None):
        """borrows: the positions whose prior is no prior of their own (see the class); by default
        every position after the first of a flat prior, none of a prior given by position."""
        self.prior = np.array(np.broadcast_to(np.asarray(prior, dtype=float), (positions,)))
        self.accepted = self.prior * weight
        self.judged = np.full(positions, float(weight))
        self.prior_left = self.judged.copy()  # how much of the judged weight is still the prior's
        if borrows is None:
            borrows = np.arange(positions) > 0 if np.ndim(prior) == 0 else np.zeros(positions, dtype=bool)
        self.borrows = np.array(borrows, dtype=bool)
        self.borrows[0] = False
        self._conditional: np.ndarray | None = None  # read many times a step, changed once a pass
        self.decay = decay
        # All positions together, decayed every pass: the recent average rate (`rate`; tests and
        # reports read it, the policies use the per-position counts).
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
        self.prior_left[:n] *= fade
        self._conditional = None
        self.overall = [self.decay * self.overall[0] + float(passed.sum()),
                        self.decay * self.overall[1] + float(reach.sum())]

    @property
    def conditional(self) -> np.ndarray:
        """c_j for every position j (0-based)."""
        if self._conditional is not None:
            return self._conditional
        c = np.divide(self.accepted, self.judged, out=np.zeros_like(self.accepted), where=self.judged > 0)
        for j in np.flatnonzero(self.borrows):
            lift = c[j - 1] - self.prior[j]
            if lift > 0:  # the prior's share of the counts moves up to the position before
                c[j] += self.prior_left[j] * lift / self.judged[j]
        c.flags.writeable = False
        self._conditional = c
        return c

    @property
    def unjudged(self) -> np.ndarray:
        """The positions with less than one judged draft of evidence (the rest is the prior)."""
        return self.judged - self.prior_left < 1.0

    def expected_tokens(self, k: int) -> float:
        return expected_tokens(self.conditional, k)

    def optimistic(self, z: float) -> "AcceptanceBound":
        """The same counts read at the top of their plausible range: each c_j at Wilson's upper
        bound, z standard deviations up. Little evidence leaves it high, much evidence near c_j."""
        n = np.maximum(self.judged, 1e-9)
        c = np.clip(self.conditional, 0.0, 1.0)
        spread = z * np.sqrt(c * (1 - c) / n + z * z / (4 * n * n))
        return AcceptanceBound(np.minimum(1.0, (c + z * z / (2 * n) + spread) / (1 + z * z / n)))

    @property
    def rate(self) -> float:
        """Recent accepted over judged drafts, all positions together."""
        return self.overall[0] / self.overall[1] if self.overall[1] > 0 else 0.0


class AcceptanceBound:
    """A fixed acceptance by position (an AcceptanceTracker.optimistic reading), priced like a tracker."""

    def __init__(self, conditional: np.ndarray):
        self.conditional = conditional

    def expected_tokens(self, k: int) -> float:
        return expected_tokens(self.conditional, k)
