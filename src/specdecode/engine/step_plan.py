"""The plan stage of a step: each row's source and k, then the load cap over the batch.

A row's own choice is fixed k (cut to what its proposer can draft now when it shares the batch) or
k="auto"'s (adaptive.SourceChoice, at the measured costs); the load cap (policy/load_cap.py) then bounds
every row's k by what pays for the whole batch, the identity at one row.
"""

from __future__ import annotations

from ..policy.costs import best_k, pass_seconds
from ..policy.knobs import LoadCapKnobs
from ..policy.load_cap import LoadPolicy, RowPlan
from ..proposers.base import Plan

def plan_rows(rows, proposers: dict, policy: LoadPolicy, costs, k_max: int, limit: int,
              knobs: LoadCapKnobs = LoadCapKnobs()) -> tuple[list[Plan], bool]:
    """(a plan per row, whether any row wanted to draft); costs None: k="auto" without its cost rule.

    Under a load-policy probe, rows whose draft model is further behind than knobs.probe_max_behind
    draft nothing: a probe measures acceptance, and that is not worth a draft model's catch-up."""
    plans, wants = [], []
    for r in rows:
        proposer = proposers[r.proposer]
        model = proposer.uses_draft_model
        if r.auto is not None:
            reach = proposer.reach(r, k_max)
            source, k = r.auto.choose(costs, reach)
            if source == "draft" and k and len(rows) == 1 and costs is not None \
                    and not lone_catch_up_pays(r, costs, proposer.behind(r), min(reach["draft"], r.room(limit)), knobs):
                # The draft model's catch-up would not pay back: the lookup drafts if it can.
                others = {name: n for name, n in reach.items() if name != "draft"}
                source, k = r.auto.choose(costs, others) if others else (source, 0)
            acceptance = r.auto.rules[source].acceptance
            model = source == "draft"
        else:
            source, k = None, r.request.k
            if len(rows) > 1:  # what the row can really draft now (a lookup may find nothing)
                reach = proposer.reach(r, k)
                k = min(k, max(reach.values(), default=0))
                # A hybrid row asks its lookup first: the model drafts only where it has nothing.
                model = model and not any(n for name, n in reach.items() if name != "draft")
            acceptance = r.acceptance
        plans.append(Plan(min(k, r.room(limit)), source,
                          min_confidence=r.auto.min_confidence if r.auto is not None else 0.0))
        wants.append(RowPlan(plans[-1].k, acceptance, model, proposer.behind(r) if model and k else 0))
    cap = policy.cap(wants)
    for r, plan, want in zip(rows, plans, wants):
        wanted = plan.k
        plan.k = 0 if policy.probing and want.behind > knobs.probe_max_behind else min(plan.k, cap)
        # A tree is k levels deep; where the load cap cut k its budget shrinks in proportion.
        if r.tree and plan.k:
            plan.nodes = max(plan.k, -(-r.tree * plan.k // max(wanted, 1)))
    return plans, any(w.wanted for w in wants)


def lone_catch_up_pays(r, costs, behind: int, k: int, knobs: LoadCapKnobs) -> bool:
    """catch_up_pays for a k="auto" row alone whose draft model is `behind`, up to the k the row could
    draft (a row of a batch is priced by the load policy instead).

    The saving is read at the draft's acceptance `knobs.catch_up_optimism` standard deviations up
    (AcceptanceTracker.optimistic): the catch-up is paid once, and only a draft that is caught up is
    ever judged. Read at its mean, a draft whose prior is below what it does on this text (the
    calibration text's agreement against greedy code's) is never caught up, so never drafts, so its
    prior is never corrected; read at the top of its plausible range, it is tried, and once judged
    the range narrows to what it really does."""
    if behind <= knobs.probe_max_behind:
        return True
    hope = r.auto.rules["draft"].acceptance.optimistic(knobs.catch_up_optimism)
    want = RowPlan(k, hope, True, behind)
    return catch_up_pays(costs, want, k, r.params.max_new_tokens - len(r.request.generated), knobs.catch_up_horizon)


def catch_up_pays(costs, want: RowPlan, k: int, remaining: int,
                  horizon: int = LoadCapKnobs.catch_up_horizon) -> bool:
    """A k="auto" row alone (a fixed k is drafted as asked), whose draft model must first process
    `want.behind` tokens (it has not drafted for a while, or never): draft only if the time
    speculation saves per token, times the tokens left (at most `horizon`: max_new_tokens bounds
    them from above, and a request may stop much earlier), exceeds the catch-up. Over several rows the load
    policy prices it."""
    if not costs.verify.points or not costs.catch_up:
        return True
    # Per token, at the costs k="auto"'s own rule uses: a probe (k = 1 where no k pays) saves nothing,
    # so a draft far behind is not caught up just to be probed.
    # The saving is the best k' <= k's: the catch-up is paid once, whichever k then drafts.
    draft = costs.draft_price("draft") if "draft" in costs.per_draft else costs.draft_step(1)
    plain = pass_seconds(costs.verify, draft, 0)
    _, rate = best_k(want.acceptance.expected_tokens, lambda n: pass_seconds(costs.verify, draft, n), k)
    return (plain - 1 / rate) * min(remaining, horizon) > costs.catch_up_seconds(want.behind)
