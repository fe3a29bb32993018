"""Continuous batching: every request in a mixed, changing batch gets exactly what it would get alone."""

import itertools

import pytest
import torch

from specdecode.batch_engine import BatchEngine, BatchRequest, QueueFull, generate_batch
from specdecode.engine import RequestError, SpeculativeGenerator
from specdecode.load_policy import AcceptanceTracker, CostCurve, LoadPolicy, RowPlan
from specdecode.sampling import InvalidParameter, SamplingParams

PROMPTS = [
    [5, 6, 7, 8, 9, 10, 5, 6, 7],
    [40, 41],
    [3],
    [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 100, 101],
]


def alone(gen, req: BatchRequest) -> list[int]:
    # With its load policy off the batch engine makes no timing-based choice; neither may the
    # one-request engine (k="auto"'s cost rule reads measured pass times), or a seeded sample differs.
    gen.auto_cost_cap = False
    try:
        return gen.generate(req.prompt_ids, req.params, k=req.k, chat=False, proposer=req.proposer).token_ids
    finally:
        gen.auto_cost_cap = True


def mixed_requests():
    """Different proposers, k (fixed and auto), temperatures, filters, seeds and lengths."""
    settings = itertools.cycle([
        ("draft", 3, SamplingParams(temperature=1.0, seed=11, max_new_tokens=12)),
        ("ngram", 4, SamplingParams(temperature=0.0, max_new_tokens=9)),
        ("none", 0, SamplingParams(temperature=0.8, top_k=20, seed=12, max_new_tokens=7)),
        ("draft", "auto", SamplingParams(temperature=1.0, top_p=0.9, seed=13, max_new_tokens=15)),
        ("draft", 2, SamplingParams(temperature=0.0, max_new_tokens=10)),
        ("ngram", 2, SamplingParams(temperature=1.3, min_p=0.05, seed=14, max_new_tokens=11)),
    ])
    return [BatchRequest(list(PROMPTS[i % len(PROMPTS)]), params.replace(ignore_eos=True), k=k, proposer=name)
            for i, (name, k, params) in zip(range(12), settings)]


@pytest.mark.parametrize("max_batch", [1, 3, 8])
def test_each_request_gets_what_it_would_get_alone(small_draft_gen, max_batch):
    engine = BatchEngine(small_draft_gen, max_batch=max_batch, load_policy=False, calibrate=False)
    requests = generate_batch(engine, mixed_requests())
    for req in requests:
        assert req.finish_reason == "length", req.error
        assert req.generated == alone(small_draft_gen, req), (req.proposer, req.k, req.params)
    assert engine.running == 0 and engine.target.batch_size == 0 and engine.draft.batch_size == 0
    assert engine.counters["finished"] == len(requests)


def test_engine_without_a_draft_model(target_model, tok):
    """A server started for prompt lookup or plain decoding loads no draft model; rows still leave
    and join cleanly (a finished row used to crash the step when there was no draft batch)."""
    gen = SpeculativeGenerator.from_models(target_model, tok, "ngram")
    engine = BatchEngine(gen, max_batch=3, load_policy=False, calibrate=False)
    requests = [r for r in mixed_requests() if r.proposer != "draft"]
    generate_batch(engine, requests)
    for req in requests:
        assert req.finish_reason == "length", req.error
        assert req.generated == alone(gen, req)
    assert engine.running == 0 and engine.draft is None


def test_rows_join_while_others_decode(twin_gen):
    engine = BatchEngine(twin_gen, max_batch=4, load_policy=False, calibrate=False)
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


def test_streaming_callback_and_stop_strings(twin_gen):
    engine = BatchEngine(twin_gen, max_batch=2, load_policy=False, calibrate=False)
    plain = alone(twin_gen, BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=20, ignore_eos=True), k=0,
                                         proposer="none"))
    text = twin_gen.tokenizer.decode(plain, skip_special_tokens=True)
    stop = text[6:9]
    pieces = []
    req = BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=20, stop=[stop], ignore_eos=True), k=3,
                       proposer="draft", on_step=lambda r, toks, delta: pieces.append((list(toks), delta)))
    generate_batch(engine, [req])
    assert req.finish_reason == "stop"
    assert req.text == text[: text.index(stop)] == "".join(d for _, d in pieces)
    assert sum(len(t) for t, _ in pieces) == len(req.generated)


def test_cancel_frees_the_slot(small_draft_gen):
    engine = BatchEngine(small_draft_gen, max_batch=2, load_policy=False, calibrate=False)
    a, b, c = (BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=40, ignore_eos=True), k=2, proposer="draft")
               for _ in range(3))
    for r in (a, b, c):
        engine.submit(r)
    engine.step()
    assert engine.running == 2 and engine.queued == 1
    engine.cancel(a)
    engine.step()  # a leaves before the step, c takes its slot
    assert a.finish_reason == "abort" and engine.running == 2 and engine.queued == 0
    assert engine.draft.batch_size == 2
    engine.run_until_idle()
    assert b.generated == c.generated == alone(small_draft_gen, b)
    assert engine.counters["aborted"] == 1


def test_queue_limit_and_bad_requests(twin_gen):
    engine = BatchEngine(twin_gen, max_batch=1, max_waiting=2, load_policy=False, calibrate=False)
    engine.submit(BatchRequest([1, 2]))
    engine.submit(BatchRequest([1, 2]))
    with pytest.raises(QueueFull, match="retry later"):
        engine.submit(BatchRequest([1, 2]))
    with pytest.raises(RequestError, match="context"):
        engine.check(BatchRequest(list(range(1, 10)) * 100))
    with pytest.raises(RequestError, match="proposer"):
        engine.check(BatchRequest([1], proposer="medusa"))
    with pytest.raises(RequestError, match="batched server runs the proposers draft, ngram, none"):
        engine.check(BatchRequest([1], proposer="hybrid"))  # the generator has it, the batch engine not
    with pytest.raises(InvalidParameter, match="k must be"):
        engine.check(BatchRequest([1], k=-1))


def test_a_failing_request_does_not_affect_the_others(twin_gen, monkeypatch):
    engine = BatchEngine(twin_gen, max_batch=4, load_policy=False, calibrate=False)
    good = [BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2, proposer="draft")
            for _ in range(2)]
    bad = BatchRequest([66, 66, 66], SamplingParams(max_new_tokens=8), k=2, proposer="draft")
    real = engine.target.add_row

    def add_row(prefix):
        if prefix[:1] == [66]:
            raise RuntimeError("simulated failure in this request's prefill")
        return real(prefix)

    monkeypatch.setattr(engine.target, "add_row", add_row)
    generate_batch(engine, [good[0], bad, good[1]])
    assert bad.finish_reason == "error" and "simulated" in bad.error
    assert all(r.finish_reason == "length" and r.generated == alone(twin_gen, r) for r in good)


def test_a_failing_batched_pass_ends_its_requests_and_the_engine_recovers(twin_gen, monkeypatch):
    engine = BatchEngine(twin_gen, max_batch=4, load_policy=False, calibrate=False)
    victims = [BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2) for _ in range(2)]
    for r in victims:
        engine.submit(r)
    monkeypatch.setattr(engine.target, "forward", lambda rows: (_ for _ in ()).throw(RuntimeError("out of memory")))
    engine.step()
    assert all(r.finish_reason == "error" and "out of memory" in r.error for r in victims)
    later = BatchRequest([5, 6, 7], SamplingParams(max_new_tokens=8, ignore_eos=True), k=2)
    generate_batch(engine, [later])  # fresh runners: the patched one is gone
    assert later.generated == alone(twin_gen, later)


# -- the load policy ------------------------------------------------------------------------------

def test_policy_turns_speculation_off_when_verification_cost_grows_with_width():
    cpu_like = CostCurve({1: 0.10, 4: 0.40, 8: 0.80, 16: 1.60, 32: 3.2})  # cost ~ tokens scored
    policy = LoadPolicy(cpu_like, CostCurve({1: 0.05, 8: 0.1}))
    rows = [RowPlan(4, AcceptanceTracker(0.5), True) for _ in range(8)]
    assert policy.cap(rows) == 0
    gpu_like = CostCurve({1: 0.010, 8: 0.0105, 16: 0.011, 64: 0.014})  # memory-bound: nearly flat
    policy = LoadPolicy(gpu_like, CostCurve({1: 0.001, 8: 0.0012}))
    assert policy.cap([RowPlan(4, AcceptanceTracker(0.8), True)]) == 4
    # Same GPU, low acceptance: drafting costs more than it returns.
    expensive_draft = LoadPolicy(gpu_like, CostCurve({1: 0.008, 8: 0.009}))
    assert expensive_draft.cap([RowPlan(4, AcceptanceTracker(0.1), True)]) == 0
    # Cheap n-gram drafts on a flat curve pay even at modest acceptance.
    assert LoadPolicy(gpu_like).cap([RowPlan(3, AcceptanceTracker(0.6), False)] * 4) == 3
    assert LoadPolicy(cpu_like, enabled=False).cap(rows) == 4
    # A near-tie stays plain: +4% expected tokens at equal cost is inside the 5% margin.
    flat = CostCurve({1: 0.1, 64: 0.1})
    assert LoadPolicy(flat).cap([RowPlan(1, AcceptanceTracker(0.04), False)]) == 0
    assert LoadPolicy(flat, margin=0.0).cap([RowPlan(1, AcceptanceTracker(0.04), False)]) == 1


def test_policy_learns_what_wide_multi_row_passes_really_cost():
    """Calibrated on one row, scoring more tokens looks free; passes over 8 rows say otherwise."""
    flat = CostCurve({1: 0.10, 8: 0.10, 16: 0.11, 32: 0.12, 64: 0.13})
    policy = LoadPolicy(flat)
    rows = [RowPlan(4, AcceptanceTracker(0.3), False)] * 8
    assert policy.cap(rows) > 0  # believed to pay
    for _ in range(3):
        policy.observe_verify(8, 1, 0.20)
        policy.observe_verify(8, 5, 0.45)
    assert policy.verify_seconds(8, 5) == pytest.approx(0.45)
    assert policy.cap(rows) == 0
    # A width not yet tried over 8 rows is scaled like the passes over 8 rows that were.
    assert policy.verify_seconds(8, 3) > 1.5 * policy.verify(24)
    assert policy.verify_seconds(1, 3) == policy.verify(3)  # one row: the curve as measured


def test_acceptance_tracker_follows_recent_blocks():
    t = AcceptanceTracker()
    for _ in range(20):
        t.update(4, 4)
    assert t.conditional[:4].min() > 0.9 and t.expected_tokens(4) > 4.5
    for _ in range(40):  # rejected at the first draft: only that position is judged, and it falls
        t.update(4, 0)
    assert t.conditional[0] < 0.1 and t.expected_tokens(4) < 1.1
    # What was learnt of the later positions stays, for when the first draft matches again.
    assert t.conditional[1:4].min() > 0.9 and t.conditional[4] == 0.5  # never judged: the prior


def test_engine_under_a_cpu_like_cost_curve_stops_drafting(small_draft_gen):
    engine = BatchEngine(small_draft_gen, max_batch=4, calibrate=False)
    engine.policy.verify = CostCurve({1: 0.1, 4: 0.4, 8: 0.8, 32: 3.2})
    engine.policy.draft = CostCurve({1: 0.05, 4: 0.2})
    requests = [BatchRequest(list(p), SamplingParams(max_new_tokens=12, ignore_eos=True), k=4, proposer="draft")
                for p in PROMPTS]
    generate_batch(engine, requests)
    assert engine.counters["speculation_off_steps"] > 0
    assert engine.policy.last_cap == 0
    assert all(r.generated == alone(small_draft_gen, r) for r in requests)  # greedy: same tokens either way


def test_calibration_fills_the_cost_curves(small_draft_gen):
    engine = BatchEngine(small_draft_gen, max_batch=2)
    assert sorted(engine.policy.verify.points) == [1, 2, 4, 8, 16, 32]
    assert sorted(engine.policy.draft.points) == [1, 2, 4, 8]
    assert all(v > 0 for v in engine.policy.verify.points.values())


def test_nan_free_with_one_token_prompts(small_draft_gen):
    engine = BatchEngine(small_draft_gen, max_batch=4, load_policy=False, calibrate=False)
    reqs = [BatchRequest([7], SamplingParams(temperature=1.0, seed=s, max_new_tokens=6, ignore_eos=True), k=2,
                         proposer="draft") for s in range(3)]
    generate_batch(engine, reqs)
    for r in reqs:
        assert r.generated == alone(small_draft_gen, r)
    assert torch.isfinite(engine.target.pos.float()).all()


def test_policy_probes_now_and_then_while_speculation_is_off():
    cpu_like = CostCurve({1: 0.10, 4: 0.40, 8: 0.80, 16: 1.60, 32: 3.2})
    policy = LoadPolicy(cpu_like, CostCurve({1: 0.05, 8: 0.1}), probe_every=8)
    rows = [RowPlan(4, AcceptanceTracker(0.5), True) for _ in range(8)]
    caps = [policy.cap(rows) for _ in range(16)]
    assert caps == ([0] * 7 + [1]) * 2


def test_new_rows_start_from_the_proposers_pooled_acceptance(small_draft_gen):
    engine = BatchEngine(small_draft_gen, max_batch=4, load_policy=False, calibrate=False)
    generate_batch(engine, [BatchRequest(list(p), SamplingParams(max_new_tokens=12, ignore_eos=True), k=4,
                                         proposer="draft") for p in PROMPTS])
    assert engine.pooled["draft"].rate < 0.3  # a random small draft is mostly rejected
    assert engine.pooled["ngram"].rate == 0.5  # untouched prior


def test_draft_rows_join_late_and_rejoin_after_a_long_pause(small_draft_gen, monkeypatch):
    engine = BatchEngine(small_draft_gen, max_batch=4, load_policy=False, calibrate=False)
    caps = iter([3, 3] + [0] * 20)
    real_cap = engine.policy.cap
    monkeypatch.setattr(engine.policy, "cap", lambda plans: next(caps, real_cap(plans)))
    joins = []
    real_add = engine.draft.add_row
    monkeypatch.setattr(engine.draft, "add_row", lambda prefix: (joins.append(len(prefix)), real_add(prefix)))
    reqs = [BatchRequest(list(p), SamplingParams(max_new_tokens=40, ignore_eos=True), k=3, proposer="draft")
            for p in PROMPTS[:2]]
    generate_batch(engine, reqs)
    for r in reqs:
        assert r.generated == alone(small_draft_gen, r)
    # Each row joined at its first drafting step and rejoined once after 20 steps without drafts.
    assert len(joins) == 4 and engine.draft.batch_size == 0
