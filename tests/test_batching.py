"""Continuous batching: every request in a mixed, changing batch gets exactly what it would get alone."""

import contextlib
import itertools

import pytest
import torch

from specdecode.policy.costs import AcceptanceTracker, CostCurve, PassCosts
from specdecode import SpeculativeGenerator
from specdecode.policy.calibration import calibrate
from specdecode.policy.knobs import LoadCapKnobs
from specdecode.policy.load_cap import LoadPolicy, RowPlan
from specdecode.engine.request import QueueFull, Request, RequestError
from specdecode.sampling.params import InvalidParameter, SamplingParams



@contextlib.contextmanager
def engine_with(gen, max_batch=8, max_waiting=64, load_policy=True):
    """The generator itself is the batch engine; this runs it with the test's knobs."""
    with gen.configured(max_batch=max_batch, max_waiting=max_waiting, load_policy=load_policy, cost_rule=False):
        yield gen


def generate_batch(engine, requests):
    for req in requests:
        engine.submit(req)
    engine.run_until_idle()
    return requests

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 5, 6, 7],
    [40, 41],
    [3],
    [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 100, 101],
]


def alone(gen, req: Request) -> list[int]:
    # With its load policy off the engine makes no timing-based choice at many rows; neither may one
    # row (k="auto"'s cost rule reads measured pass times), or a seeded sample differs.
    with gen.configured(cost_rule=False, max_batch=8, max_waiting=64):
        return gen.generate(req.prompt_ids, req.params, k=req.k, chat=False, proposer=req.proposer).token_ids


def mixed_requests():
    """Different proposers, k (fixed and auto), temperatures, filters, seeds and lengths."""
    settings = itertools.cycle([
        ("draft", 3, SamplingParams(temperature=1.0, seed=11, max_new_tokens=12)),
        ("ngram", 4, SamplingParams(temperature=0.0, max_new_tokens=9)),
        ("none", 0, SamplingParams(temperature=0.8, top_k=20, seed=12, max_new_tokens=7)),
        ("draft", "auto", SamplingParams(temperature=1.0, top_p=0.9, seed=13, max_new_tokens=15)),
        ("draft", 2, SamplingParams(temperature=0.0, max_new_tokens=10)),
        ("ngram", 2, SamplingParams(temperature=1.3, min_p=0.05, seed=14, max_new_tokens=11)),
        ("hybrid", 3, SamplingParams(temperature=1.0, top_k=30, seed=15, max_new_tokens=13)),
        ("hybrid", "auto", SamplingParams(temperature=0.0, max_new_tokens=9)),
        # The suffix memory differs between the batch and the runs alone after it (they see the
        # batch's answers): greedy and seeded (drafter-invariant) rows get the same tokens anyway.
        ("suffix", 4, SamplingParams(temperature=0.0, max_new_tokens=14)),
        ("hybrid-suffix", "auto", SamplingParams(temperature=1.0, seed=16, max_new_tokens=12)),
        ("suffix", "auto", SamplingParams(temperature=0.9, top_p=0.8, seed=17, max_new_tokens=10)),
    ])
    return [Request(list(PROMPTS[i % len(PROMPTS)]), params.replace(ignore_eos=True), k=k, proposer=name)
            for i, (name, k, params) in zip(range(22), settings)]


@pytest.mark.parametrize("max_batch", [1, 3, 8])
def test_each_request_gets_what_it_would_get_alone(small_draft_gen, max_batch):
    with engine_with(small_draft_gen, max_batch=max_batch, load_policy=False) as engine:
        before = dict(engine.counters)
        requests = generate_batch(engine, mixed_requests())
        assert engine.counters["finished"] - before["finished"] == len(requests)
        assert engine.running == 0 and engine.target.rows == 0 and engine.proposers['draft'].runner.rows == 0
        for req in requests:
            assert req.finish_reason == "length", req.error
            assert req.generated == alone(small_draft_gen, req), (req.proposer, req.k, req.params)


def test_engine_without_a_draft_model(target_model, tok):
    """A server started for prompt lookup or plain decoding loads no draft model; rows still leave
    and join cleanly (a finished row used to crash the step when there was no draft batch)."""
    gen = SpeculativeGenerator.from_models(target_model, tok, "ngram")
    with engine_with(gen, max_batch=3, load_policy=False) as engine:
        requests = [r for r in mixed_requests() if r.proposer not in ("draft", "hybrid", "hybrid-suffix")]
        generate_batch(engine, requests)
        for req in requests:
            assert req.finish_reason == "length", req.error
            assert req.generated == alone(gen, req)
        assert engine.running == 0 and 'draft' not in engine.proposers


def test_rows_join_while_others_decode(twin_gen):
    with engine_with(twin_gen, max_batch=4, load_policy=False) as engine:
        first, late = mixed_requests()[:3], mixed_requests()[3:7]
        for r in first:
            engine.submit(r)
        engine.step()
        engine.step()
        for r in late:  # join mid-flight, possibly longer than the rows already there
            engine.submit(r)
        engine.run_until_idle()
        for req in first + late:
            assert req.generated == alone(twin_gen, req)
        # A twin draft is always accepted.
        drafted = [r for r in first + late if r.proposer == "draft"]
        assert all(r.stats.accepted_tokens == r.stats.drafted_tokens > 0 for r in drafted)


def test_generate_from_several_threads_takes_turns_at_the_steps(small_draft_gen):
    """generate() from several threads on one engine (a caller's beside a server's loop): steps run one
    at a time, each advancing every running request, and each request gets what it would get alone."""
    import concurrent.futures

    with engine_with(small_draft_gen, max_batch=8, load_policy=False) as engine:
        requests = mixed_requests()[:8]

        def run(req):
            return engine.generate(req.prompt_ids, req.params, k=req.k, chat=False, proposer=req.proposer).token_ids

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            outputs = list(pool.map(run, requests))
        for req, out in zip(requests, outputs):
            assert out == alone(small_draft_gen, req), (req.proposer, req.k, req.params)


def test_configured_refuses_a_busy_engine_and_restores_the_config(small_draft_gen):
    """A config swapped under running requests would change them halfway: configured() refuses."""
    engine = small_draft_gen
    saved = engine.config
    req = Request([5, 6, 7], SamplingParams(max_new_tokens=6, ignore_eos=True), k=2, proposer="draft")
    engine.submit(req)
    with pytest.raises(RuntimeError, match="idle engine"):
        with engine.configured(cost_rule=False):
            pass
    assert engine.config is saved
    engine.run_until_idle()
    assert req.finish_reason == "length"
    with engine.configured(max_batch=3) as busy:
        assert busy.config.max_batch == 3
    assert engine.config is saved


def test_streaming_callback_and_stop_strings(twin_gen):
    with engine_with(twin_gen, max_batch=2, load_policy=False) as engine:
        plain = alone(twin_gen, Request([5, 6, 7], SamplingParams(max_new_tokens=20, ignore_eos=True), k=0,
                                             proposer="none"))
        text = twin_gen.tokenizer.decode(plain, skip_special_tokens=True)
        stop = text[6:9]
        pieces = []
        req = Request([5, 6, 7], SamplingParams(max_new_tokens=20, stop=[stop], ignore_eos=True), k=3,
                           proposer="draft", on_step=lambda r, toks, delta: pieces.append((list(toks), delta)))
        generate_batch(engine, [req])
        assert req.finish_reason == "stop"
        assert req.text == text[: text.index(stop)] == "".join(d for _, d in pieces)
        assert sum(len(t) for t, _ in pieces) == len(req.generated)


def test_cancel_frees_the_slot(small_draft_gen):
    with engine_with(small_draft_gen, max_batch=2, load_policy=False) as engine:
        before = dict(engine.counters)
        a, b, c = (Request([5, 6, 7], SamplingParams(max_new_tokens=40, ignore_eos=True), k=2, proposer="draft")
                   for _ in range(3))
        for r in (a, b, c):
            engine.submit(r)
        engine.step()
        assert engine.running == 2 and engine.queued == 1
        engine.cancel(a)
        engine.step()  # a leaves before the step, c takes its slot
        assert a.finish_reason == "abort" and engine.running == 2 and engine.queued == 0
        assert engine.proposers['draft'].runner.rows == 2
        engine.run_until_idle()
        assert b.generated == c.generated == alone(small_draft_gen, b)
        assert engine.counters["aborted"] - before["aborted"] == 1


def test_queue_limit_and_bad_requests(twin_gen):
    with engine_with(twin_gen, max_batch=1, max_waiting=2, load_policy=False) as engine:
        engine.submit(Request([1, 2]))
        engine.submit(Request([1, 2]))
        with pytest.raises(QueueFull, match="retry later"):
            engine.submit(Request([1, 2]))
        with pytest.raises(RequestError, match="context"):
            engine.check(Request(list(range(1, 10)) * 100))
        with pytest.raises(RequestError, match="proposer"):
            engine.check(Request([1], proposer="medusa"))
        engine.check(Request([1], proposer="hybrid"))  # every proposer runs batched
        with pytest.raises(InvalidParameter, match="k must be"):
            engine.check(Request([1], k=-1))
        for req in list(engine.waiting):  # the engine is shared: leave it idle
            engine.cancel(req)
        engine.run_until_idle()


def test_a_failing_request_does_not_affect_the_others(twin_gen, monkeypatch):
    with engine_with(twin_gen, max_batch=4, load_policy=False) as engine:
        good = [Request([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2, proposer="draft")
                for _ in range(2)]
        bad = Request([66, 66, 66], SamplingParams(max_new_tokens=8), k=2, proposer="draft")
        real = engine.target.add_rows

        def add_rows(prefix, count=1):
            if prefix[:1] == [66]:
                raise RuntimeError("simulated failure in this request's prefill")
            return real(prefix, count)

        monkeypatch.setattr(engine.target, "add_rows", add_rows)
        generate_batch(engine, [good[0], bad, good[1]])
        assert bad.finish_reason == "error" and "simulated" in bad.error
        assert all(r.finish_reason == "length" and r.generated == alone(twin_gen, r) for r in good)


def test_a_failing_batched_pass_ends_its_requests_and_the_engine_recovers(twin_gen, monkeypatch):
    with engine_with(twin_gen, max_batch=4, load_policy=False) as engine:
        victims = [Request([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2) for _ in range(2)]
        for r in victims:
            engine.submit(r)
        monkeypatch.setattr(engine.target, "forward",
                            lambda rows, last_only=False: (_ for _ in ()).throw(RuntimeError("out of memory")))
        engine.step()
        assert all(r.finish_reason == "error" and "out of memory" in r.error for r in victims)
        assert engine.target.rows == 0 and engine.proposers["draft"].runner.rows == 0  # caches emptied
        monkeypatch.undo()  # the fault goes away; the engine serves on
        later = Request([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2)
        generate_batch(engine, [later])
        assert later.generated == alone(twin_gen, later)


# -- the load policy ------------------------------------------------------------------------------

def costs_of(verify: CostCurve, draft: CostCurve | None = None) -> PassCosts:
    costs = PassCosts()
    costs.verify = verify
    if draft is not None:
        costs.draft = draft
    return costs


def policy(verify: CostCurve, draft: CostCurve | None = None, **kw) -> LoadPolicy:
    return LoadPolicy(costs_of(verify, draft), **kw)


@contextlib.contextmanager
def own_costs(gen, costs: PassCosts):
    """Costs for this test alone: the fixture's generator outlives it."""
    saved = gen.pass_costs
    gen.pass_costs = gen.policy.costs = costs
    try:
        yield costs
    finally:
        gen.pass_costs = gen.policy.costs = saved


def test_policy_turns_speculation_off_when_verification_cost_grows_with_width():
    cpu_like = CostCurve({1: 0.10, 4: 0.40, 8: 0.80, 16: 1.60, 32: 3.2})  # cost ~ tokens scored
    rows = [RowPlan(4, AcceptanceTracker(0.5), True) for _ in range(8)]
    assert policy(cpu_like, CostCurve({1: 0.05, 8: 0.1})).cap(rows) == 0
    gpu_like = CostCurve({1: 0.010, 8: 0.0105, 16: 0.011, 64: 0.014})  # memory-bound: nearly flat
    two = [RowPlan(4, AcceptanceTracker(0.8), True)] * 2
    assert policy(gpu_like, CostCurve({1: 0.001, 8: 0.0012})).cap(two) == 4
    # Same GPU, low acceptance: drafting costs more than it returns.
    expensive_draft = policy(gpu_like, CostCurve({1: 0.008, 8: 0.009}))
    assert expensive_draft.cap([RowPlan(4, AcceptanceTracker(0.1), True)] * 2) == 0
    # One row: the cap is the identity (the row's own k already is the one-row rule's choice).
    assert expensive_draft.cap([RowPlan(4, AcceptanceTracker(0.1), True)]) == 4
    # Cheap n-gram drafts on a flat curve pay even at modest acceptance.
    assert policy(gpu_like).cap([RowPlan(3, AcceptanceTracker(0.6), False)] * 4) == 3
    assert policy(cpu_like, enabled=False).cap(rows) == 4
    # A near-tie stays plain: +4% expected tokens at equal cost is inside the margin.
    flat = CostCurve({1: 0.1, 64: 0.1})
    assert policy(flat).cap([RowPlan(1, AcceptanceTracker(0.04), False)] * 2) == 0
    assert policy(flat, knobs=LoadCapKnobs(margin=0.0)).cap([RowPlan(1, AcceptanceTracker(0.04), False)] * 2) == 1


def test_policy_charges_a_draft_models_catch_up_to_the_step_that_turns_it_on():
    gpu_like = CostCurve({1: 0.010, 8: 0.0105, 16: 0.011, 64: 0.014})
    costs = costs_of(gpu_like, CostCurve({1: 0.001, 8: 0.0012}))
    caught_up = [RowPlan(4, AcceptanceTracker(0.8), True, behind=1)] * 2
    far_behind = [RowPlan(4, AcceptanceTracker(0.8), True, behind=300)] * 2
    assert LoadPolicy(costs).cap(far_behind) == 4  # a catch-up of unknown cost is not charged
    costs.observe_catch_up(128, 0.128)  # 1 ms a token: 0.6 s to catch two rows up on 300 tokens
    assert LoadPolicy(costs).cap(caught_up) == 4
    assert LoadPolicy(costs).cap(far_behind) == 0
    # Lookup rows catch nothing up.
    assert LoadPolicy(costs).cap([RowPlan(4, AcceptanceTracker(0.8), False)] * 2) == 4


def test_a_row_alone_drafts_after_a_catch_up_only_if_its_remaining_tokens_repay_it():
    from specdecode.engine.step_plan import catch_up_pays

    costs = costs_of(CostCurve({1: 0.10, 8: 0.11}), CostCurve({1: 0.01}))
    costs.observe_catch_up(128, 0.128)  # 1 ms a context token
    row = RowPlan(4, AcceptanceTracker(0.8), True, behind=400)  # 0.4 s to catch up
    # At 80% acceptance four drafts make a token cost about 0.15 / 3.4 = 0.044 s instead of 0.10 s.
    assert catch_up_pays(costs, row, 4, remaining=64)
    assert not catch_up_pays(costs, row, 4, remaining=5)
    assert catch_up_pays(costs, RowPlan(4, AcceptanceTracker(0.8), True, behind=40), 4, remaining=5)
    assert not catch_up_pays(costs, RowPlan(4, AcceptanceTracker(0.05), True, behind=400), 4, remaining=10_000)
    # The saving is the best k's up to the one asked: on a steep curve at 76% acceptance four drafts
    # cost more than they save, one repays the catch-up (the catch-up is paid once, whatever k follows).
    steep = costs_of(CostCurve({1: 0.043, 2: 0.048, 5: 0.075}), CostCurve({1: 0.016}))
    steep.observe_catch_up(1, 0.0016)
    row = RowPlan(4, AcceptanceTracker(0.76), True, behind=60)
    assert steep.verify(5) + 4 * 0.016 > 0.043 * row.acceptance.expected_tokens(4)  # k = 4 alone loses
    assert catch_up_pays(steep, row, 4, remaining=64)
    assert not catch_up_pays(steep, RowPlan(4, AcceptanceTracker(0.3), True, behind=60), 4, remaining=64)


def test_a_long_catch_up_is_priced_at_what_long_ones_cost_not_at_short_ones_rate():
    """A few tokens caught up ride on a drafting step almost free; a prompt costs the draft's prefill
    rate. Priced at one moving average of both, a long prompt looked cheap and a draft was caught up
    on it that 64 tokens could not repay (the control: the old single rate says it pays)."""
    from specdecode.engine.step_plan import catch_up_pays
    from specdecode.policy.costs import ema

    costs = costs_of(CostCurve({1: 0.045, 2: 0.050, 3: 0.055}), CostCurve({1: 0.013}))
    single = None
    # The draft's timed prefill (2 ms a token), then catch-ups of a few tokens and one of 60.
    for tokens, seconds in [(256, 0.512)] + [(4, 0.001)] * 12 + [(60, 0.12)]:
        costs.observe_catch_up(tokens, seconds)
        single = ema(single, seconds / tokens, 0.2)
    assert costs.catch_up_seconds(4) == pytest.approx(0.001)  # its own class
    assert costs.catch_up_seconds(740) == pytest.approx(740 * 0.002)  # nearest measured class: 256
    assert costs.catch_up_seconds(60) == pytest.approx(0.12)
    row = RowPlan(2, AcceptanceTracker(0.75), True, behind=740)
    assert not catch_up_pays(costs, row, 2, remaining=64)
    assert catch_up_pays(costs, RowPlan(2, AcceptanceTracker(0.75), True, behind=60), 2, remaining=64)
    # Control: one rate for every size prices the 740 tokens at under half of what they cost.
    assert 740 * single < 0.5 * costs.catch_up_seconds(740)
    flat = costs_of(CostCurve({1: 0.045, 2: 0.050, 3: 0.055}), CostCurve({1: 0.013}))
    flat.observe_catch_up(1, single)
    assert catch_up_pays(flat, row, 2, remaining=64)


def test_a_draft_behind_on_the_prompt_is_caught_up_on_its_plausible_acceptance_not_its_mean():
    """A draft seeded at the calibration text's agreement (73%, counted as 16 drafts) that does 90% on
    greedy code: weighed at its mean the prompt's catch-up never pays, so it never drafts and its
    prior is never corrected (the control, catch_up_optimism = 0). Weighed one deviation up it is
    caught up; with the same 73% known from 200 drafts the range has narrowed and it is not."""
    from types import SimpleNamespace

    from specdecode.engine.step_plan import lone_catch_up_pays
    from specdecode.policy.auto_k import AdaptiveK

    # Zen 3 with the AVX2 rows kernels: Q4_0 target by width, the 0.5B draft's token, its prefill.
    costs = costs_of(CostCurve({1: 0.0405, 2: 0.0486, 3: 0.0562, 4: 0.0693, 5: 0.0814}), CostCurve({1: 0.0167}))
    costs.observe_catch_up(83, 0.25)

    def row(judged: float):
        rule = AdaptiveK(acceptance=AcceptanceTracker(0.73, weight=judged))
        return SimpleNamespace(auto=SimpleNamespace(rules={"draft": rule}),
                               params=SamplingParams(max_new_tokens=64), request=SimpleNamespace(generated=[0, 0]))

    seeded, known = row(16.0), row(200.0)
    assert lone_catch_up_pays(seeded, costs, 83, 8, LoadCapKnobs())
    assert not lone_catch_up_pays(seeded, costs, 83, 8, LoadCapKnobs(catch_up_optimism=0.0))
    assert not lone_catch_up_pays(known, costs, 83, 8, LoadCapKnobs())
    assert lone_catch_up_pays(seeded, costs, 2, 8, LoadCapKnobs(catch_up_optimism=0.0))  # two tokens: no catch-up


def test_a_probe_skips_rows_whose_draft_model_is_far_behind(small_draft_gen, monkeypatch):
    with engine_with(small_draft_gen, max_batch=4) as engine:
        real = engine.policy.cap

        def probe(wants):
            real(wants)
            engine.policy.probing = True
            return 1

        monkeypatch.setattr(engine.policy, "cap", probe)
        # The lookup row takes at least 4 passes (at most 2 tokens each), the draft row exactly 4:
        # it is never alone (one row would draft at its own k).
        reqs = [Request(list(PROMPTS[3]), SamplingParams(max_new_tokens=4, ignore_eos=True), k=3,
                             proposer="draft"),
                Request(list(PROMPTS[0]), SamplingParams(max_new_tokens=8, ignore_eos=True), k=3,
                             proposer="ngram")]
        generate_batch(engine, reqs)
        # The draft row never started its draft cache (it was behind by its whole prompt); the
        # lookup row drafted the probe's one token a pass.
        assert reqs[0].stats.drafted_tokens == 0
        assert reqs[1].stats.drafted_tokens > 0 and len(reqs[1].stats.drafted_per_position) == 1


def test_policy_learns_what_wide_multi_row_passes_really_cost():
    """Calibrated on one row, scoring more tokens looks free; passes over 8 rows say otherwise."""
    flat = CostCurve({1: 0.10, 8: 0.10, 16: 0.11, 32: 0.12, 64: 0.13})
    costs = costs_of(flat)
    rows = [RowPlan(4, AcceptanceTracker(0.3), False)] * 8
    assert LoadPolicy(costs).cap(rows) > 0  # believed to pay
    for _ in range(3):
        costs.observe_batch(8, 1, 0.20)
        costs.observe_batch(8, 5, 0.45)
    assert costs.verify_seconds(8, 5) == pytest.approx(0.45)
    assert LoadPolicy(costs).cap(rows) == 0
    # A width not yet tried over 8 rows is scaled like the passes over 8 rows that were.
    assert costs.verify_seconds(8, 3) > 1.5 * costs.verify(24)
    assert costs.verify_seconds(1, 3) == costs.verify(3)  # one row: the curve as measured


def test_acceptance_tracker_follows_recent_blocks():
    t = AcceptanceTracker()
    for _ in range(20):
        t.update(4, 4)
    assert t.conditional[:4].min() > 0.9 and t.expected_tokens(4) > 4.5
    for _ in range(40):  # rejected at the first draft: only that position is judged, and it falls
        t.update(4, 0)
    assert t.conditional[0] < 0.1 and t.expected_tokens(4) < 1.1
    # What was learnt of the later positions stays, for when the first draft matches again.
    assert t.conditional[1:4].min() > 0.9
    # Never judged: it borrows the position before it (a flat prior says nothing of depth).
    assert t.conditional[4] == pytest.approx(t.conditional[3])
    below = AcceptanceTracker()
    for _ in range(20):
        below.update(2, 0)
    assert below.conditional[0] < 0.2 and below.conditional[2] == 0.5  # never below the flat prior


def test_engine_under_a_cpu_like_cost_curve_stops_drafting(small_draft_gen):
    cpu_like = costs_of(CostCurve({1: 0.1, 4: 0.4, 8: 0.8, 32: 3.2}), CostCurve({1: 0.05, 4: 0.2}))
    with engine_with(small_draft_gen, max_batch=4) as engine, own_costs(engine, cpu_like):
        requests = [Request(list(p), SamplingParams(max_new_tokens=12, ignore_eos=True), k=4, proposer="draft")
                    for p in PROMPTS]
        before = dict(engine.counters)
        generate_batch(engine, requests)
        assert engine.counters["speculation_off_steps"] > before["speculation_off_steps"]
        assert engine.policy.last_cap == 0
        assert all(r.generated == alone(small_draft_gen, r) for r in requests)  # greedy: same tokens either way


def test_calibration_fills_the_cost_curves(small_draft_gen):
    with engine_with(small_draft_gen, max_batch=2) as engine, own_costs(engine, PassCosts()) as costs:
        engine.calibrate()
        assert sorted(costs.verify.points) == [1, 2, 4, 8, 16, 32]
        assert sorted(costs.draft.points) == [1, 2, 4, 8]  # draft steps over 1 to 8 rows
        assert all(v > 0 for v in costs.verify.points.values())
        assert engine.target.rows == 0 and engine.proposers["draft"].runner.rows == 0  # scratch rows gone


def test_calibration_stays_within_a_draft_runner_of_few_rows(small_draft_gen):
    # A llama.cpp draft runner is sized to the server's batch (--max-batch 1: two rows with the
    # scratch row); calibrating must not ask it for more rows than it holds.
    runner = small_draft_gen.proposers["draft"].runner

    class Sized:
        max_rows = 2

        def __getattr__(self, name):
            return getattr(runner, name)

        def add_rows(self, prefix, count=1):
            assert runner.rows + count <= self.max_rows, f"asked for {runner.rows + count} rows"
            runner.add_rows(prefix, count)

    costs = PassCosts()
    calibrate(costs, small_draft_gen.target, Sized())
    assert sorted(costs.draft.points) == [1, 2] and runner.rows == 0


def test_nan_free_with_one_token_prompts(small_draft_gen):
    with engine_with(small_draft_gen, max_batch=4, load_policy=False) as engine:
        reqs = [Request([7], SamplingParams(temperature=1.0, seed=s, max_new_tokens=6, ignore_eos=True), k=2,
                             proposer="draft") for s in range(3)]
        generate_batch(engine, reqs)
        for r in reqs:
            assert r.generated == alone(small_draft_gen, r)
        assert torch.isfinite(engine.target.pos.float()).all()


def test_policy_probes_now_and_then_while_speculation_is_off():
    cpu_like = CostCurve({1: 0.10, 4: 0.40, 8: 0.80, 16: 1.60, 32: 3.2})
    cpu = policy(cpu_like, CostCurve({1: 0.05, 8: 0.1}), knobs=LoadCapKnobs(probe_every_off_steps=8))
    rows = [RowPlan(4, AcceptanceTracker(0.5), True) for _ in range(8)]
    caps = [cpu.cap(rows) for _ in range(8 + 16 + 32)]
    # A probe that does not turn speculation on doubles the wait before the next one.
    assert caps == [0] * 7 + [1] + [0] * 15 + [1] + [0] * 31 + [1]


def test_new_rows_start_from_the_proposers_pooled_acceptance(small_draft_gen, monkeypatch):
    monkeypatch.setattr(small_draft_gen, "pooled_acceptance", {})
    with engine_with(small_draft_gen, max_batch=4, load_policy=False) as engine:
        generate_batch(engine, [Request(list(p), SamplingParams(max_new_tokens=12, ignore_eos=True), k=4,
                                             proposer="draft") for p in PROMPTS])
        assert engine.pooled("draft").rate < 0.3  # a random small draft is mostly rejected
        assert not any(source == "ngram3" for source, _ in engine.pooled_acceptance)  # no lookup ran: nothing learnt
        assert engine.pooled("ngram3").rate == 0.5  # a new source starts from the prior


def test_greedy_and_sampled_requests_pool_their_acceptance_apart(small_draft_gen, monkeypatch):
    """Sampled requests learn the sampled pool only: a greedy request after them starts from the
    greedy pool's prior, a sampled one from what the sampled ones learnt."""
    monkeypatch.setattr(small_draft_gen, "pooled_acceptance", {})
    with engine_with(small_draft_gen, max_batch=4, load_policy=False) as engine:
        generate_batch(engine, [Request(list(p), SamplingParams(max_new_tokens=12, temperature=1.0, seed=i,
                                                                ignore_eos=True), k=4, proposer="draft")
                                for i, p in enumerate(PROMPTS)])
        weight = engine.config.acceptance.prior_weight
        sampled_pool, greedy_pool = engine.pooled("draft", sampled=True), engine.pooled("draft", sampled=False)
        assert sampled_pool.judged[0] > weight + 5  # the control: the sampled requests' drafts were counted
        assert greedy_pool.judged[0] == weight and greedy_pool.rate == 0.5  # the greedy pool is still the prior
        greedy = engine.row_acceptance("draft", sampled=False).conditional[0]
        sampled = engine.row_acceptance("draft", sampled=True).conditional[0]
        assert greedy == pytest.approx(0.5) and sampled == pytest.approx(sampled_pool.conditional[0])


def test_draft_rows_join_late_and_rejoin_after_a_long_pause(small_draft_gen, monkeypatch):
    with engine_with(small_draft_gen, max_batch=4, load_policy=False) as engine:
        caps = iter([3, 3] + [0] * 20)
        real_cap = engine.policy.cap
        monkeypatch.setattr(engine.policy, "cap", lambda plans: next(caps, real_cap(plans)))
        joins = []
        runner = engine.proposers["draft"].runner
        real_add = runner.add_rows
        monkeypatch.setattr(runner, "add_rows", lambda prefix, count=1: (joins.append(len(prefix)),
                                                                           real_add(prefix, count)))
        reqs = [Request(list(p), SamplingParams(max_new_tokens=40, ignore_eos=True), k=3, proposer="draft")
                for p in PROMPTS[:2]]
        generate_batch(engine, reqs)
        # Each row joined at its first drafting pass and rejoined once after 20 steps without drafts.
        assert len(joins) == 4 and runner.rows == 0
        for r in reqs:
            assert r.generated == alone(small_draft_gen, r)


def test_a_row_that_never_drafts_never_prefills_the_draft(small_draft_gen, monkeypatch):
    with engine_with(small_draft_gen, max_batch=4) as engine:
        monkeypatch.setattr(engine.policy, "cap", lambda plans: 0)
        runner = engine.proposers["draft"].runner
        monkeypatch.setattr(runner, "add_rows", lambda *a, **kw: pytest.fail("the draft prefilled a row"))
        reqs = [Request(list(p), SamplingParams(max_new_tokens=8, ignore_eos=True), k=3, proposer="draft")
                for p in PROMPTS[:2]]
        generate_batch(engine, reqs)
        for r in reqs:
            assert r.generated == alone(small_draft_gen, r) and r.stats.drafted_tokens == 0


def test_a_row_alone_whose_draft_catch_up_does_not_pay_drafts_from_its_lookup():
    """k="auto" picks the draft model, but it is far behind and few tokens remain: the pass goes to
    the lookup's match instead of to nothing."""
    from specdecode.engine.step_plan import plan_rows
    from specdecode.policy.auto_k import AdaptiveK, SourceChoice

    class Hybrid:
        uses_draft_model = True

        def reach(self, row, k):
            return {"ngram3": 3, "draft": k}

        def behind(self, row):
            return 800

    costs = costs_of(CostCurve({1: 0.10, 9: 0.11}), CostCurve({1: 0.01}))
    costs.per_draft = {"ngram3": 0.0, "draft": 0.01}
    # 0.8 s to catch 800 tokens up: more than the 6 tokens left take plainly (0.6 s), so no
    # acceptance, however hoped for, repays it.
    costs.observe_catch_up(128, 0.128)
    from specdecode.engine.row import Row

    row = Row(Request([1, 2, 3], SamplingParams(max_new_tokens=6), k="auto", proposer="hybrid"), None, frozenset(),
              AcceptanceTracker(0.5), 16, deterministic_proposer=False)
    # The draft model accepts a little more than the lookup, so it is the first choice.
    row.auto = SourceChoice({"ngram3": AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.8)),
                             "draft": AdaptiveK(k_max=8, acceptance=AcceptanceTracker(0.9))})
    assert row.auto.choose(costs, {"ngram3": 3, "draft": 8})[0] == "draft"
    plans, _ = plan_rows([row], {"hybrid": Hybrid()}, LoadPolicy(costs), costs, 8, 4096)
    assert (plans[0].source, plans[0].k) == ("ngram3", 3)
    # Caught up (nothing behind), the draft model drafts as chosen.
    Hybrid.behind = lambda self, row: 0
    plans, _ = plan_rows([row], {"hybrid": Hybrid()}, LoadPolicy(costs), costs, 8, 4096)
    assert plans[0].source == "draft" and plans[0].k > 0
