"""Every number the engine's policies run on, in one place, each named by the rule it sets.

`EngineConfig` (engine/config.py) holds one of each group; the policy classes take their defaults
from here, so a number is written once. Why each value: docs/choosing-k.md (k="auto", the load cap,
acceptance tracking) and docs/exactness.md, "Tree drafting" (branching).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AutoKKnobs:
    """k="auto" per request (policy/auto_k.py)."""

    # The largest k it may reach. The cost rule holds k short where deep drafts do not pay; this only
    # bounds a lookup that is right for long stretches (an answer the suffix memory has seen before).
    # Far above it a long draft rejected early costs a wide pass (measurements: docs/choosing-k.md).
    k_max: int = 16
    k_start: int = 4  # the controller's first allowance
    grow_after_full_block: int = 2  # allowance added when a block that used all of it was accepted whole
    shrink_after_rejection: int = 1  # allowance taken away when a draft was rejected
    # A draft model drafts no further after a position where its top probability is below this.
    min_confidence: float = 0.4
    # Passes with speculation off before a probe, so a change in the text is noticed.
    probe_every_off_passes: int = 16
    # A probe tries the source whose best k would pay most with its acceptance this many standard
    # deviations above its estimate: the least known and most promising, not the next in turn.
    probe_optimism: float = 1.0


@dataclass(frozen=True)
class LoadCapKnobs:
    """The cap on k over a batch of rows (policy/load_cap.py)."""

    # Over several rows, speculate only when the best cap beats plain decoding by this fraction (the
    # optimiser's curse: a step speculates after lucky acceptance that does not carry on).
    margin: float = 0.15
    probe_every_off_steps: int = 32  # steps with speculation off before a probe
    probe_wait_growth_limit: int = 16  # a failed probe doubles the wait, up to this many times the above
    # Under a probe, rows whose draft model is further behind than this draft nothing.
    probe_max_behind: int = 2
    # A row alone weighs a draft model's catch-up against the saving over at most this many tokens.
    catch_up_horizon: int = 256
    # ... at the draft's acceptance this many standard deviations above its estimate (0: the estimate):
    # the catch-up is what lets a draft be judged at all (engine/step_plan.lone_catch_up_pays).
    catch_up_optimism: float = 1.0


@dataclass(frozen=True)
class AcceptanceKnobs:
    """Acceptance by position (policy/costs.AcceptanceTracker)."""

    prior: float = 0.5  # a row's acceptance before anything is known (a source's pooled one replaces it)
    prior_weight: float = 8.0  # the prior counts as this many judged drafts
    # A source's pooled acceptance, where its prior was measured here (--draft auto's agreement over
    # the calibration text), starts from it counted as this many judged drafts: a few early
    # rejections then move it, not turn the source off for every request after.
    measured_prior_weight: float = 16.0
    row_decay: float = 0.9  # a row's counts fade by this per judged draft: they follow the text
    pooled_decay: float = 0.98  # a source's counts over all requests fade more slowly


@dataclass(frozen=True)
class TreeKnobs:
    """Where a draft model branches (proposers/draft.next_choices)."""

    branch_below: float = 0.95  # branch where the drafted token has less than this of the draft's mass
    branch_above: float = 0.02  # a sibling needs at least this share to be tried
    branches: int = 2  # siblings per branching position
