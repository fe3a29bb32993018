"""k="auto": the controller moves k the expected way, and outputs stay exact."""

import pytest

from specdecode import SamplingParams
from specdecode.policy.auto_k import AdaptiveK
from specdecode.policy.knobs import AutoKKnobs
from specdecode.proposers import Plan
from specdecode.policy.costs import AcceptanceBound, AcceptanceTracker, CostCurve, DraftCost, PassCosts


def test_controller_grows_on_full_acceptance_and_shrinks_on_rejection():
    c = AdaptiveK(k_max=8, k=4)
    for _ in range(5):
        c.update(drafted=c.k, accepted=c.k)
    assert c.k == 8
    for _ in range(10):
        c.update(drafted=c.k, accepted=0)
    assert c.k == 1
    # A short block that was fully accepted (the draft stopped early on its own) is no reason to grow.
    c = AdaptiveK(k_max=8, k=4)
    c.update(drafted=2, accepted=2)
    assert c.k == 4
    with pytest.raises(ValueError):
        AdaptiveK(k_max=2, k=4)


def greedy(n):
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def test_auto_drafts_long_blocks_for_a_perfect_draft(twin_gen):
    # A random tiny model is never confident (top probability ~0.1), so this test switches the
    # confidence stop off and watches the controller alone.
    # The cost rule is off too: the twin draft costs as much as the target, so it would not pay.
    with twin_gen.configured(auto_k=AutoKKnobs(min_confidence=0.0), cost_rule=False):
        out = twin_gen.generate("abc", greedy(120), k="auto", chat=False, proposer="draft")
    fixed = twin_gen.generate("abc", greedy(120), k=4, chat=False, proposer="draft")
    assert out.token_ids == fixed.token_ids
    assert out.stats["mean_accepted_tokens"] > fixed.stats["mean_accepted_tokens"]
    assert len(out.stats["per_position_acceptance"]) == AutoKKnobs().k_max  # k climbed to k_max


def test_auto_backs_off_for_a_bad_draft(small_draft_gen):
    out = small_draft_gen.generate("abc", greedy(40), k="auto", chat=False, proposer="draft")
    plain = small_draft_gen.generate("abc", greedy(40), k=0, chat=False, proposer="none")
    assert out.token_ids == plain.token_ids
    # Mostly rejected: k falls to 1, so most passes draft a single token.
    assert out.stats["drafted_tokens"] / out.stats["target_passes"] < 1.6


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
def test_auto_greedy_equals_plain(twin_gen, small_draft_gen, proposer):
    for gen in (twin_gen, small_draft_gen):
        for prompt in ("def f(x):", "the the the the"):
            plain = gen.generate(prompt, greedy(30), k=0, chat=False, proposer="none")
            assert gen.generate(prompt, greedy(30), k="auto", chat=False, proposer=proposer).token_ids == \
                plain.token_ids


def test_confidence_stop_shortens_drafts(twin_gen):
    # Nothing is that sure: one draft per pass. The cost rule is off, so that the controller alone
    # decides whether to draft (at a twin draft's measured costs drafting barely pays either way).
    with twin_gen.configured(auto_k=AutoKKnobs(min_confidence=0.99), cost_rule=False):
        out = twin_gen.generate("abc", greedy(30), k="auto", chat=False, proposer="draft")
    assert out.stats["drafted_tokens"] <= out.stats["target_passes"]
    assert len(out.stats["per_position_acceptance"]) == 1


def test_bad_k_is_a_clear_error(twin_gen):
    from specdecode import InvalidParameter

    with pytest.raises(InvalidParameter, match="or 'auto'"):
        twin_gen.generate("x", greedy(3), k="sometimes")


def test_cost_cap_follows_draft_cost_and_acceptance():
    c = AdaptiveK(k_max=8)
    flat = CostCurve({1: 0.1, 9: 0.1})  # a memory-bound verify: width is nearly free
    per_token = CostCurve({1: 0.1, 9: 0.9})  # a compute-bound one: every token scored costs
    assert c.best_by_cost(0.0, flat, AcceptanceTracker(0.5)) == 8  # free drafts and free width: draft all that is allowed
    assert c.best_by_cost(0.05, flat, AcceptanceTracker(0.9)) == 3  # expensive drafts pay only for a few positions
    assert c.best_by_cost(0.05, flat, AcceptanceTracker(0.9)) > c.best_by_cost(0.05, flat, AcceptanceTracker(0.6)) == 1
    assert c.best_by_cost(0.05, flat, AcceptanceTracker(0.3)) == 0  # does not beat plain decoding: off
    assert c.best_by_cost(0.0, per_token, AcceptanceTracker(0.9)) == 0  # scoring is as dear as decoding: never pays
    assert c.best_by_cost(0.01, flat, AcceptanceTracker(0.8)) > c.best_by_cost(0.03, flat, AcceptanceTracker(0.8))  # cheaper draft, longer k


def test_a_width_seldom_run_follows_the_machine_s_speed():
    """A shared machine's passes get faster or slower together. The one-token passes of a request
    whose drafting is off see it; a two-token pass, run rarely, must follow, or the draft model is
    priced at a wider pass's old cost against today's one-token pass and never turned on again.
    The control: a curve whose widths move alone (shared = 0, a moving average per width) keeps the
    old two-token cost and turns a draft that pays off."""
    from specdecode.policy.costs import PassCosts

    def after_speedup(shared):
        costs = PassCosts()
        costs.verify = CostCurve({1: 0.030, 2: 0.032, 3: 0.035}, shared=shared)
        costs.per_draft["draft"] = 0.009
        for _ in range(2):  # the widths seen once each at the old speed
            for width in (1, 2, 3):
                costs.observe("draft", drafted=width - 1, draft_s=0.009 * (width - 1), width=width,
                              verify_s=CostCurve({1: 0.030, 2: 0.032, 3: 0.035})(width))
        for _ in range(60):  # then the machine runs 25% faster, with drafting off
            costs.observe("none", drafted=0, draft_s=0.0, width=1, verify_s=0.0225)
        return costs

    moved, stuck = after_speedup(CostCurve().shared), after_speedup(0.0)
    assert moved.verify(1) == pytest.approx(0.0225, rel=0.01) == stuck.verify(1)
    # 32/30 was the shape: off by at most the unshared part of the speed change (1/0.75)
    shared = CostCurve().shared
    assert moved.verify(2) / moved.verify(1) < (0.032 / 0.030) * (0.030 / 0.0225) ** (1 - shared) * 1.01
    assert stuck.verify(2) / stuck.verify(1) == pytest.approx(0.032 / 0.0225, rel=0.01)
    assert moved.per_draft["draft"] < 0.009 * 0.8  # the idle draft model got faster too
    rule, acceptance = AdaptiveK(), AcceptanceTracker(0.74, weight=100)
    assert rule.best(moved.per_draft["draft"], moved.verify, acceptance)[0] > 0
    assert rule.best(stuck.per_draft["draft"], stuck.verify, acceptance)[0] == 0


def test_choice_follows_the_costs_and_probes_while_off():
    from specdecode.policy.auto_k import SourceChoice
    from specdecode.policy.costs import PassCosts

    costs = PassCosts()
    c = AdaptiveK(k_max=8, k=8)
    auto = SourceChoice({"draft": c})
    assert auto.choose(costs, {"draft": 8}) == ("draft", 8)  # nothing measured yet: the controller alone
    costs.observe("draft", drafted=4, draft_s=0.2, width=5, verify_s=0.1)
    costs.observe("draft", drafted=0, draft_s=0.0, width=1, verify_s=0.1)
    assert costs.per_draft["draft"] == 0.05
    for i in range(20):  # high acceptance (every fourth pass rejects the sixth draft), but each draft costs half a pass
        auto.update("draft", drafted=8, accepted=(8, 8, 8, 5)[i % 4])
    best = c.best_by_cost(0.05, costs.verify, c.acceptance)
    assert c.acceptance.rate > 0.9 and 1 < best < 8 and auto.choose(costs, {"draft": 8}) == ("draft", best)
    c.k = 1  # once costs are known the cost rule decides, not the controller's allowance
    assert auto.choose(costs, {"draft": 8}) == ("draft", best)
    for _ in range(30):
        auto.update("draft", drafted=1, accepted=0)
    ks = [auto.choose(costs, {"draft": 8})[1] for _ in range(32)]
    assert ks.count(1) == 2 and set(ks) == {0, 1}  # off, with a one-token probe every 16 passes


def test_choice_between_sources_follows_their_acceptance_and_cost():
    """The hybrid: free lookup drafts where they are accepted, the dear draft model elsewhere."""
    from specdecode.policy.auto_k import SourceChoice
    from specdecode.policy.costs import PassCosts

    costs = PassCosts()
    costs.verify = CostCurve({1: 0.1, 9: 0.11})
    costs.per_draft = {"ngram": 0.0, "draft": 0.04}
    lookup, model = AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.9)), AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.7))
    auto = SourceChoice({"ngram": lookup, "draft": model})
    source, k = auto.choose(costs, {"ngram": 6, "draft": 8})
    assert source == "ngram" and k == 6  # a good match: as far as it reaches
    assert auto.choose(costs, {"ngram": 0, "draft": 8}) == ("draft", model.best_by_cost(0.04, costs.verify,
                                                                                        model.acceptance))
    for _ in range(40):
        auto.update("ngram", drafted=6, accepted=0)  # the lookup's matches stop being accepted
    assert auto.choose(costs, {"ngram": 6, "draft": 8})[0] == "draft"
    # A source whose cost is not measured yet drafts at its controller's allowance, to be measured.
    del costs.per_draft["draft"]
    assert auto.choose(costs, {"ngram": 0, "draft": 8}) == ("draft", model.k)


def test_a_lookup_right_at_every_position_it_drafted_is_tried_deeper():
    """What k=auto does not draft it never judges. A lookup accepted at both positions it drafted
    must not be held at k = 2 by the flat prior of the positions after (CPU-like costs: each token
    of the verify pass adds a fifth of a one-token pass); the row, started from the pooled tracker,
    borrows likewise. The control, the same counts read with a flat prior at every position, stays
    at 2: the test can fail."""
    from specdecode.policy.costs import best_k, pass_seconds

    verify = CostCurve({1: 0.040, 2: 0.049, 3: 0.056, 4: 0.069, 5: 0.081, 7: 0.104, 9: 0.130})
    pooled, flat = AcceptanceTracker(), AcceptanceTracker(borrows=[False] * 32)  # the control: none borrows
    for _ in range(30):
        pooled.update(2, 2)
        flat.update(2, 2)
    row = AcceptanceTracker(pooled.conditional, borrows=pooled.unjudged)
    rule = AdaptiveK(k_max=8)
    assert rule.best(0.0005, verify, pooled)[0] > 2 and rule.best(0.0005, verify, row)[0] > 2
    assert rule.best(0.0005, verify, flat)[0] == 2
    # What a deeper pass then judges takes over: rejected at the third position, back to 2.
    for _ in range(30):
        row.update(4, 2)
    assert row.conditional[2] < 0.2 and rule.best(0.0005, verify, row)[0] == 2
    assert best_k(row.expected_tokens, lambda k: pass_seconds(verify, 0.0005, k), 8)[0] == 2


def test_auto_with_an_expensive_draft_drafts_only_probes(twin_gen):
    from specdecode.policy.costs import PassCosts

    costs = PassCosts()
    costs.verify = CostCurve({1: 0.1, 16: 0.1})
    costs.per_draft["draft"] = 0.2  # each draft token twice a target pass: speculation cannot pay
    costs.observe = lambda *a, **kw: None
    saved = twin_gen.pass_costs
    twin_gen.pass_costs = costs
    try:
        out = twin_gen.generate("abc", greedy(40), k="auto", chat=False, proposer="draft")
    finally:
        twin_gen.pass_costs = saved
    plain = twin_gen.generate("abc", greedy(40), k=0, chat=False, proposer="none")
    assert out.token_ids == plain.token_ids
    assert out.stats["drafted_tokens"] <= 3  # the probes only


def test_acceptance_by_position_sees_bursty_drafts():
    # n-gram-like drafts: the first draft is accepted 20% of the time, but after a match the next
    # ones are accepted 80% of the time. Per position the tracker sees what one average rate hides.
    bursty = AcceptanceTracker(decay=1.0)  # no decay: plain averages, so the test is not at the mercy of luck
    rng = __import__("random").Random(0)
    for _ in range(400):
        accepted = 0
        if rng.random() < 0.2:
            accepted = 1
            while accepted < 8 and rng.random() < 0.8:
                accepted += 1
        bursty.update(8, accepted)
    c = bursty.conditional
    assert c[0] < 0.3 and c[1:8].min() > 0.6
    assert bursty.expected_tokens(8) == pytest.approx(1 + sum(c[:i].prod() for i in range(1, 9)))
    # Taken as i.i.d. at the same average rate, long drafts look far less worth it.
    iid = AcceptanceTracker(bursty.rate)
    gain, iid_gain = (t.expected_tokens(8) - t.expected_tokens(2) for t in (bursty, iid))
    assert gain > 2 * iid_gain
    rule = AdaptiveK(k_max=8)
    rising = CostCurve({1: 0.100, 9: 0.105})  # scoring more tokens costs a little
    assert rule.best_by_cost(0.001, rising, bursty) >= rule.best_by_cost(0.001, rising, iid) + 3


def test_acceptance_prior_is_per_position():
    pooled = AcceptanceTracker()
    for _ in range(50):
        pooled.update(3, 1)  # first accepted, second rejected, third never judged
    fresh = AcceptanceTracker(prior=pooled.conditional)
    assert fresh.conditional[0] > 0.9 and fresh.conditional[1] < 0.1 and fresh.conditional[2] == 0.5


def test_lookup_match_lengths_are_sources_of_their_own():
    from specdecode.proposers import HybridProposer, NgramProposer

    ngram = NgramProposer(max_n=3, min_n=1)
    assert list(ngram.sources) == ["ngram3", "ngram2", "ngram1"]
    from types import SimpleNamespace

    row = SimpleNamespace(context=[1, 2, 3, 4, 9, 2, 3])  # the suffix [2, 3] was seen before, followed by 4, 9
    assert ngram.reach(row, 8) == {"ngram3": 0, "ngram2": 4, "ngram1": 0}
    (proposal,) = ngram.propose([row], [Plan(2)])
    assert proposal.tokens == [4, 9] and proposal.source == "ngram2"
    assert ngram.reach(SimpleNamespace(context=[5, 6, 7]), 8) == {"ngram3": 0, "ngram2": 0, "ngram1": 0}
    hybrid = HybridProposer(ngram, draft=object())
    assert list(hybrid.sources) == ["ngram3", "ngram2", "ngram1", "draft"]
    assert hybrid.reach(row, 8) == {"ngram3": 0, "ngram2": 4, "ngram1": 0, "draft": 8}


def test_auto_skips_weak_lookup_matches_but_keeps_strong_ones():
    """With its own acceptance per match length, auto can stop drafting after one-token matches
    that are never accepted while it goes on drafting after three-token matches that are."""
    from specdecode.policy.auto_k import SourceChoice
    from specdecode.policy.costs import PassCosts

    costs = PassCosts()
    costs.verify = CostCurve({1: 0.1, 9: 0.102})
    costs.per_draft = {"ngram3": 0.0, "ngram1": 0.0}
    auto = SourceChoice({"ngram3": AdaptiveK(k_max=8), "ngram1": AdaptiveK(k_max=8)})
    for _ in range(60):
        auto.update("ngram3", drafted=6, accepted=6)
        auto.update("ngram1", drafted=6, accepted=0)
    assert auto.choose(costs, {"ngram3": 6, "ngram1": 0}) == ("ngram3", 6)
    assert auto.choose(costs, {"ngram3": 0, "ngram1": 6}) == ("ngram1", 0)  # off for weak matches


def test_acceptance_counts_chances_instead_of_coins():
    """Given each draft's chance min(1, p/q), a tracker counts expected acceptance: greedy (0/1
    chances) it is the same as counting what happened, and sampling it follows the true c_j with
    far less noise than counting the sampler's coins."""
    import numpy as np

    a, b = AcceptanceTracker(), AcceptanceTracker()
    for drafted, accepted, chances in [(3, 1, [1.0, 0.0, 1.0]), (4, 4, [1.0] * 4), (2, 0, [0.0, 1.0])]:
        a.update(drafted, accepted)
        b.update(drafted, accepted, chances)
        assert np.allclose(a.conditional, b.conditional) and a.rate == pytest.approx(b.rate)

    rng = np.random.default_rng(0)
    runs, passes, mean = 200, 30, 0.6
    errors = {"coins": [], "chances": [], "control": []}
    for _ in range(runs):
        trackers = {name: AcceptanceTracker() for name in errors}
        for _ in range(passes):
            chances = rng.beta(3, 2, size=2)  # E = 0.6, the true c_1 (and c_2, independent)
            accepted = 0 if rng.random() >= chances[0] else (1 if rng.random() >= chances[1] else 2)
            trackers["coins"].update(2, accepted)
            trackers["chances"].update(2, accepted, list(chances))
            # Negative control: the coins passed off as chances must do no better than the coins.
            trackers["control"].update(2, accepted, [float(i < accepted) for i in range(2)])
        for name, t in trackers.items():
            errors[name].append((t.conditional[0] - mean) ** 2)
    mse = {name: float(np.mean(e)) for name, e in errors.items()}
    assert mse["chances"] < 0.5 * mse["coins"]
    assert mse["control"] == pytest.approx(mse["coins"])


def test_auto_learns_from_chances(twin_gen, monkeypatch):
    """The engine hands each pass's chances to k=auto's and the pooled acceptance."""
    seen = []
    original = AcceptanceTracker.update

    def spy(self, drafted, accepted, chances=None):
        seen.append((drafted, None if chances is None else len(chances)))
        return original(self, drafted, accepted, chances)

    monkeypatch.setattr(AcceptanceTracker, "update", spy)
    # Whether the cost rule drafts at all depends on the pass costs this machine has learnt so far;
    # the controller alone always drafts, which is what this test needs.
    monkeypatch.setattr(twin_gen, "pooled_acceptance", {})
    for k in ("auto", 2):
        seen.clear()
        with twin_gen.configured(cost_rule=False):
            twin_gen.generate("abc", SamplingParams(max_new_tokens=12, temperature=1.0, seed=3, sampler="standard"), k=k,
                              chat=False,
                              proposer="draft")
        drafted_passes = [(d, n) for d, n in seen if d > 0]
        assert drafted_passes and all(n == d for d, n in drafted_passes)


def test_the_configs_knobs_reach_the_rules_they_set(twin_gen):
    from specdecode.policy.knobs import AcceptanceKnobs, LoadCapKnobs, TreeKnobs

    engine = twin_gen
    knobs = dict(acceptance=AcceptanceKnobs(prior=0.7, prior_weight=9.0, row_decay=0.8, pooled_decay=0.95),
                 load_cap=LoadCapKnobs(margin=0.3, probe_every_off_steps=5), tree=TreeKnobs(branch_below=0.5),
                 auto_k=AutoKKnobs(k_max=6, min_confidence=0.1))
    saved = dict(engine.pooled_acceptance)
    engine.pooled_acceptance.clear()  # the pooled trackers are built from the config when first needed
    try:
        with engine.configured(**knobs):
            assert engine.policy.margin == 0.3 and engine.policy.probe_every == 5 and engine.policy.wait_limit == 80
            assert engine.proposers["draft"].tree == TreeKnobs(branch_below=0.5)
            pooled = engine.pooled("draft")
            assert pooled.decay == 0.95 and pooled.rate == pytest.approx(0.7)
            row = engine.row_acceptance("draft")
            assert row.decay == 0.8 and row.accepted[0] == pytest.approx(9.0 * pooled.conditional[0])
            rule = engine._auto_k(("draft",)).rules["draft"]
            assert (rule.k_max, rule.min_confidence, rule.acceptance.decay) == (6, 0.1, 0.8)
        # Back to the defaults when the block ends.
        assert engine.policy.margin == LoadCapKnobs().margin and engine.proposers["draft"].tree == TreeKnobs()
    finally:
        engine.pooled_acceptance.clear()
        engine.pooled_acceptance.update(saved)


def test_optimistic_acceptance_is_wide_on_little_evidence_and_tight_on_much():
    little, much = AcceptanceTracker(0.5, weight=4.0), AcceptanceTracker(0.5, weight=400.0)
    hi_little, hi_much = little.optimistic(1.0).conditional[0], much.optimistic(1.0).conditional[0]
    assert 0.7 < hi_little < 1.0  # four judged drafts at 50%: up to ~72% is plausible
    assert 0.5 < hi_much < 0.53  # four hundred: barely above the estimate
    assert little.optimistic(0.0).conditional[0] == pytest.approx(0.5)  # z = 0 is the estimate itself
    assert AcceptanceTracker(1.0).optimistic(3.0).conditional.max() <= 1.0


def test_a_probe_tries_the_promising_lookup_not_the_sources_in_turn():
    """Off (no source pays at its estimate), a probe goes to the source that could pay at its
    optimistic acceptance: a long lookup match judged little, not a draft model known to cost more
    than it saves. In turn, the draft would get every other probe."""
    from specdecode.policy.auto_k import SourceChoice
    from specdecode.policy.costs import PassCosts

    costs = PassCosts()
    costs.verify = CostCurve({1: 0.10, 2: 0.165, 4: 0.20, 9: 0.40})  # a steep CPU curve
    costs.per_draft = {"ngram3": 0.0, "draft": 0.033}
    lookup = AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.5))  # the prior: nothing known
    model = AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.6, weight=200.0))  # known: does not pay
    auto = SourceChoice({"ngram3": lookup, "draft": model}, probe_every=4)
    assert lookup.best(0.0, costs.verify, lookup.acceptance, 8)[0] == 0  # at its estimate the lookup is off
    picks = [auto.choose(costs, {"ngram3": 8, "draft": 8}) for _ in range(16)]
    probes = [p for p in picks if p[1]]
    assert len(probes) == 4 and all(source == "ngram3" and k > 1 for source, k in probes)  # several positions judged
    # With no optimism there is no hope either, and probes go to the sources in turn (the control).
    auto = SourceChoice({"ngram3": lookup, "draft": model}, probe_every=4, optimism=0.0)
    probes = [p for p in (auto.choose(costs, {"ngram3": 8, "draft": 8}) for _ in range(16)) if p[1]]
    assert {source for source, _ in probes} == {"ngram3", "draft"}


# A draft model's drafting as timed through the engine on a 2-core Zen 3 (docs/choosing-k.md): a
# part every pass pays plus a part a token, and the target's verify pass by width on the same machine.
def drafting_s(k):
    return 0.006 + 0.0107 * k


ZEN3_VERIFY = CostCurve({1: .0405, 2: .0486, 3: .0562, 4: .0693, 5: .0814, 6: .0935})


def test_a_draft_is_priced_as_a_part_a_pass_plus_a_part_a_token():
    import numpy as np

    cost = DraftCost(step=0.0115)  # one forward step of the draft alone, as --draft auto times it
    assert cost(3) == pytest.approx(3 * 0.0115)  # before any pass: the step a token
    cost.observe(1, drafting_s(1))
    # One k seen: the line through it with the step's slope, so k = 3 is priced within 5%, where
    # k times the k = 1 pass's cost is 27% over.
    assert cost(3) == pytest.approx(drafting_s(3), rel=0.05)
    assert 3 * drafting_s(1) > 1.25 * drafting_s(3)
    cost.observe(3, drafting_s(3))
    assert [cost(k) for k in (2, 6, 16)] == pytest.approx([drafting_s(k) for k in (2, 6, 16)])
    cost.scale(2.0)  # the machine slowed down: every k with it
    assert cost(4) == pytest.approx(2 * drafting_s(4))
    # Without a step, one k seen is priced in proportion; noise that makes a deeper k look cheaper is
    # read as the proportional fit, never as a price that falls with k or is below 0 at k = 1.
    alone = DraftCost()
    alone.observe(2, 0.03)
    assert alone(4) == pytest.approx(0.06)
    alone.observe(1, 0.02)
    alone.observe(2, 0.019)
    assert 0 < alone(1) < alone(2) < alone(3)
    # k=auto on these costs at 95% acceptance a position: the learnt price picks the k the true
    # costs pick; priced a token at the k = 1 pass's cost (the control) it stops short.
    acceptance, rule = AcceptanceBound(np.full(32, 0.95)), AdaptiveK()
    learnt = DraftCost(step=0.0115)
    learnt.observe(1, drafting_s(1))
    right = rule.best(drafting_s, ZEN3_VERIFY, acceptance)[0]
    assert rule.best(learnt, ZEN3_VERIFY, acceptance)[0] == right > 2
    assert rule.best(drafting_s(1), ZEN3_VERIFY, acceptance)[0] < right


def test_pass_costs_learn_each_sources_drafting_by_k():
    costs = PassCosts()
    costs.seed_draft("draft", 0.0115)
    assert costs.draft_price("draft")(2) == pytest.approx(0.023)
    for k in (1, 2, 1, 2):
        costs.observe("draft", k, drafting_s(k), 1 + k, ZEN3_VERIFY(1 + k))
    assert costs.draft_price("draft")(5) == pytest.approx(drafting_s(5))
    costs.observe("ngram3", 3, 3e-5, 4, ZEN3_VERIFY(4))  # a lookup's price is its own
    assert costs.draft_price("ngram3")(3) == pytest.approx(3e-5)
    assert costs.draft_price("draft")(5) == pytest.approx(drafting_s(5))
