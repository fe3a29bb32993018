"""Statistical proof that speculative sampling reproduces the target's distribution.

Toy target P and draft Q (conditional tables over V tokens, tests/toy.py) go through the real
rejection_sample round after round until L = 3 tokens exist; the joint distribution of those L
tokens (V^L cells, so the bonus token and the position after a rejection are covered) is compared
with the exact one computed from P.

Each check is a chi-square goodness-of-fit test on cells merged to expected count >= 5 at level
ALPHA = 1e-3: under a correct sampler a single check fails with probability 0.1% (false alarm),
and the whole suite of ~25 positive checks with probability about 2.5%. The seeds are fixed, so a
run is deterministic; the thresholds come from ALPHA and the sample size alone, never from the
data. We also check TV(empirical, exact) <= the Bretagnolle-Huber-Carol bound at the same level.
Negative controls run the same sample size through three wrong algorithms and must be rejected.
"""

import pytest
import torch

import toy
from specdecode.checks.goodness import one_sample
from specdecode.policy.knobs import AutoKKnobs
from specdecode.checks.naive import naive_rejection_sample
from specdecode.verification.rejection import rejection_sample
from specdecode.sampling.params import SamplingParams

ALPHA = 1e-3
N = 30_000
L = 3
T1 = SamplingParams(temperature=1.0)


def check(counts, P, params):
    result = one_sample(counts, toy.exact_joint(P, params, L), alpha=ALPHA)
    assert sum(counts.values()) == N
    return result


def assert_exact(result):
    assert result.p_value >= ALPHA, result
    assert result.tv_distance <= result.tv_bound, result


def tables(V=4, seed=0):
    return toy.random_table(V, seed), toy.random_table(V, seed + 100)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_p_equals_q(k):
    P, _ = tables(seed=1)
    assert_exact(check(toy.simulate(P, P, k, N, L, seed=k, params=T1), P, T1))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_different_p_and_q(k):
    P, Q = tables(seed=2)
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=10 + k, params=T1), P, T1))


@pytest.mark.parametrize("k", [1, 3])
def test_disjoint_supports(k):
    V = 6
    P, Q = tables(V, seed=3)
    P[..., V // 2 :] = float("-inf")  # P lives on the first half, Q on the second
    Q[..., : V // 2] = float("-inf")
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=20 + k, params=T1), P, T1))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_q_zero_where_p_positive(k):
    P, Q = tables(V=5, seed=4)
    Q[..., 0] = float("-inf")  # the draft never proposes token 0, which P likes
    P[..., 0] += 1.5
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=30 + k, params=T1), P, T1))


def test_near_one_hot_p():
    P, Q = tables(V=4, seed=5)
    P = P * 6.0  # most rows put > 0.99 on one token
    assert_exact(check(toy.simulate(P, Q, 3, N, L, seed=40, params=T1), P, T1))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_one_hot_q_deterministic_drafts(k):
    P, Q = tables(V=4, seed=6)
    counts = toy.simulate(P, Q, k, N, L, seed=50 + k, params=T1, deterministic=True)
    assert_exact(check(counts, P, T1))


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.6),
        SamplingParams(temperature=1.3, top_k=2),
        SamplingParams(temperature=1.0, top_p=0.7),
        SamplingParams(temperature=1.0, min_p=0.25),
        SamplingParams(temperature=0.8, top_k=3, top_p=0.9, min_p=0.05),
    ],
    ids=["temperature", "top_k", "top_p", "min_p", "combined"],
)
@pytest.mark.parametrize("k", [1, 3])
def test_sampling_transforms_on_both_sides(params, k):
    P, Q = tables(V=5, seed=7)
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=60 + k, params=params), P, params))


def test_larger_vocabulary():
    P, Q = tables(V=12, seed=8)
    assert_exact(check(toy.simulate(P, Q, 3, N, L, seed=70, params=T1), P, T1))


def test_greedy_is_the_argmax_path():
    P, Q = tables(V=4, seed=9)
    greedy = SamplingParams(temperature=0.0)
    counts = toy.simulate(P, Q, 3, 200, L, seed=71, params=greedy)
    (only,) = toy.exact_joint(P, greedy, L).keys()
    assert counts == {only: 200}


@pytest.mark.parametrize("k", [3, 6])
def test_adaptive_confidence_stop(k):
    """k="auto"'s early stop: a row drafts on only after a position where the draft's top
    probability was >= 0.5 (the draft made there is kept either way), so rows verify different
    numbers of drafts."""
    P, Q = tables(V=4, seed=2)
    counts = toy.simulate(P, Q, k, N, L, seed=90 + k, params=T1, min_confidence=0.5)
    assert_exact(check(counts, P, T1))


# --- negative controls: the same checks must reject these wrong algorithms --------------------


def test_control_naive_residual_is_rejected():
    """Sampling from p (not max(0, p - q)) after a rejection over-produces what q likes."""
    P, Q = tables(V=4, seed=2)
    result = check(toy.simulate(P, Q, 3, N, L, seed=80, params=T1, rejection=naive_rejection_sample), P, T1)
    assert result.p_value < ALPHA, result


def test_control_forgotten_bonus_is_rejected():
    """Emitting one more unverified draft instead of the target's bonus token."""
    P, Q = tables(V=4, seed=2)
    result = check(toy.simulate(P, Q, 1, N, L, seed=81, params=T1, bonus_from_draft=True), P, T1)
    assert result.p_value < ALPHA, result


def test_control_temperature_on_one_side_is_rejected():
    """The request asks for temperature 0.5; the draft applies it, the target forgets it."""
    P, Q = tables(V=4, seed=2)
    cold = SamplingParams(temperature=0.5)
    counts = toy.simulate(P, Q, 3, N, L, seed=82, params=cold, p_params=T1)
    result = check(counts, P, cold)
    assert result.p_value < ALPHA, result


def test_control_stop_rule_on_the_sampled_token_is_rejected():
    """Stopping because the *sampled* draft looks unlikely keeps only some samples of q, and the
    kept drafts no longer follow q."""
    P, Q = tables(V=4, seed=2)
    counts = toy.simulate(P, Q, 3, N, L, seed=83, params=T1, min_confidence=0.5, confidence_of_sample=True)
    result = check(counts, P, T1)
    assert result.p_value < ALPHA, result


def test_same_seed_same_tokens_and_batch_independence():
    from specdecode.verification.rejection import rejection_sample

    torch.manual_seed(3)
    V, k = 9, 4
    q = torch.softmax(torch.randn(5, k, V), -1)
    p = torch.softmax(torch.randn(5, k + 1, V), -1)
    d = torch.multinomial(q.reshape(-1, V), 1).reshape(5, k)

    def gens(seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    a = rejection_sample(d, q, p, gens([1, 2, 3, 4, 5]))
    b = rejection_sample(d, q, p, gens([1, 2, 3, 4, 5]))
    assert torch.equal(a[0], b[0])
    # Row 2 with seed 3 gives the same tokens whatever its neighbours are.
    c = rejection_sample(d[[4, 2, 0]], q[[4, 2, 0]], p[[4, 2, 0]], gens([99, 3, 7]))
    assert torch.equal(a[0][2], c[0][1])


# -- the batched engine on a real (tiny) transformers pair --------------------------------------

BATCH_N = 1500
BATCH_PROMPT = [5, 6, 7, 8]
# The standard rule (seeded requests would default to the drafter-invariant sampler, tested below).
TOPK = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=3, ignore_eos=True, sampler="standard")


def exact_model_joint(model, prompt, params, L, shape=None):
    """P(x_1..x_L | prompt) under the sampling transform, by walking the (top-k) support;
    shape(logits, prefix), when given, transforms the target's logits first (penalties, a mask)."""
    from specdecode.sampling.params import probs_from_logits

    out = {(): 1.0}
    for _ in range(L):
        nxt = {}
        for prefix, pr in out.items():
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + list(prefix)])).logits[0, -1].float()
            if shape is not None:
                logits = shape(logits, list(prefix))
            probs = probs_from_logits(logits, params)
            for x in probs.nonzero().flatten().tolist():
                nxt[prefix + (x,)] = pr * float(probs[x])
        out = nxt
    return out


def batched_samples(gen):
    """BATCH_N seeded requests through the batch engine, mixed with other traffic: n-gram, greedy,
    other temperatures and prompts, k fixed and auto, rows joining and leaving every step."""
    from collections import Counter

    from specdecode.engine.request import Request

    engine = gen
    fillers = [("ngram", 3, SamplingParams(temperature=0.0, max_new_tokens=5)),
               ("draft", "auto", SamplingParams(temperature=0.7, seed=5, max_new_tokens=4)),
               ("none", 0, SamplingParams(temperature=1.0, top_p=0.8, max_new_tokens=3))]
    ours = []
    for i in range(BATCH_N):
        req = Request(list(BATCH_PROMPT), TOPK.replace(seed=1000 + i), k=2 + i % 2, proposer="draft")
        ours.append(req)
        engine.submit(req)
        if i % 4 == 3:
            name, k, params = fillers[i % 3]
            engine.submit(Request([9, 10, 11, 9, 10][: 2 + i % 4], params.replace(ignore_eos=True), k=k,
                                       proposer=name))
        if len(engine.waiting) > 32:
            engine.step()
    engine.run_until_idle()
    assert engine.counters["admitted"] > BATCH_N  # the fillers ran beside them
    return Counter(tuple(r.generated) for r in ours)


def test_batched_engine_joint_distribution(near_draft_gen, target_model):
    with near_draft_gen.configured(load_policy=False):
        counts = batched_samples(near_draft_gen)
    result = one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA)
    assert sum(counts.values()) == BATCH_N
    assert_exact(result)


def test_control_batched_engine_with_naive_residual_is_rejected(near_draft_gen, target_model):
    """The same engine and traffic, with the wrong rejection step (sample from p on rejection)."""
    with near_draft_gen.configured(load_policy=False, reject=naive_rejection_sample):
        counts = batched_samples(near_draft_gen)
    result = one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA)
    assert result.p_value < ALPHA, result


# -- k="auto" on the one-request engine: k chosen from the history, verification unchanged -------

class FixedCosts:
    """Pass costs the test sets (the learnt ones depend on this machine's timing): a draft token
    at 10% of a verify pass, so the cost rule drafts 2 tokens while acceptance is above ~0.35 and 1
    below: k depends on what earlier passes and requests accepted."""

    def __new__(cls):
        from specdecode.policy.costs import CostCurve, PassCosts

        costs = PassCosts()
        costs.verify = CostCurve({1: 0.1, 16: 0.1})
        costs.per_draft = {"draft": 0.01}
        # Nothing this machine times may move them: per-pass, batch, catch-up and draft-step
        # observations all stay out (a loaded machine's slow catch-up once turned drafting off).
        costs.observe = costs.observe_batch = costs.observe_catch_up = lambda *a, **kw: None
        costs.draft.observe = lambda *a, **kw: None
        return costs


def auto_samples(gen, n=BATCH_N, reject=rejection_sample):
    from collections import Counter

    saved = gen.pass_costs, gen.policy.costs, dict(gen.pooled_acceptance)
    # The confidence stop is off (toy tests cover it): here k is the cost rule's alone.
    gen.pass_costs = gen.policy.costs = FixedCosts()
    gen.pooled_acceptance = {}
    counts, drafted = Counter(), Counter()
    try:
        with gen.configured(auto_k=AutoKKnobs(min_confidence=0.0), reject=reject):
            for i in range(n):
                out = gen.generate(list(BATCH_PROMPT), TOPK.replace(seed=2000 + i), k="auto", chat=False,
                                   proposer="draft")
                counts[tuple(out.token_ids)] += 1
                drafted.update(step[1] for step in out.stats["steps"])
    finally:
        gen.pass_costs, gen.policy.costs, gen.pooled_acceptance = saved
    return counts, drafted


def test_auto_k_engine_joint_distribution(near_draft_gen, target_model):
    counts, drafted = auto_samples(near_draft_gen)
    assert drafted[1] > 100 and drafted[2] > 100  # the rule was live: k moved with the acceptance
    assert_exact(one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA))


def test_control_auto_k_engine_with_naive_residual_is_rejected(near_draft_gen, target_model):
    counts, _ = auto_samples(near_draft_gen, reject=naive_rejection_sample)
    result = one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA)
    assert result.p_value < ALPHA, result


# -- the hybrid proposer: lookup drafts (one-hot q) and draft-model drafts (sampled q) in one request --

HYBRID_PROMPT = [5, 6, 7, 5, 6]  # the lookup matches at once ([5, 6] -> 7, 5, 6), later only sometimes


def hybrid_samples(gen, k, n=BATCH_N, reject=rejection_sample):
    from collections import Counter

    saved = gen.pass_costs, gen.policy.costs, dict(gen.pooled_acceptance)
    costs = FixedCosts()
    costs.per_draft.update({source: 0.0 for source in ("ngram1", "ngram2", "ngram3")})
    gen.pass_costs = gen.policy.costs = costs
    gen.pooled_acceptance = {}
    counts, passes = Counter(), Counter()
    try:
        with gen.configured(reject=reject):
            for i in range(n):
                out = gen.generate(list(HYBRID_PROMPT), TOPK.replace(seed=3000 + i), k=k, chat=False,
                                   proposer="hybrid")
                counts[tuple(out.token_ids)] += 1
                passes.update({source.rstrip("123"): c[0] for source, c in out.stats["by_source"].items()})
    finally:
        gen.pass_costs, gen.policy.costs, gen.pooled_acceptance = saved
    return counts, passes


@pytest.mark.parametrize("k", [2, "auto"])
def test_hybrid_joint_distribution(near_draft_gen, target_model, k):
    counts, passes = hybrid_samples(near_draft_gen, k)
    # Both sources drafted. Under auto the lookup is soon left alone: its matches are rarely what
    # this random target samples, and the pooled acceptance learns that.
    assert passes["draft"] > 200 and passes["ngram"] > (200 if k == 2 else 0)
    assert_exact(one_sample(counts, exact_model_joint(target_model, HYBRID_PROMPT, TOPK, 3), alpha=ALPHA))


def test_control_hybrid_with_naive_residual_is_rejected(near_draft_gen, target_model):
    counts, _ = hybrid_samples(near_draft_gen, 2, reject=naive_rejection_sample)
    result = one_sample(counts, exact_model_joint(target_model, HYBRID_PROMPT, TOPK, 3), alpha=ALPHA)
    assert result.p_value < ALPHA, result


# -- a draft that sees only the end of the prompt: what it proposes changes, the output may not --

def test_draft_context_window_joint_distribution(near_draft_gen, target_model):
    from collections import Counter

    drafter = near_draft_gen.proposers["draft"]
    counts, prefilled = Counter(), set()
    real_start = drafter._start

    def start(rows):
        real_start(rows)
        prefilled.update(drafter.state[r.id].offset for r in rows)

    drafter.context_window = 2  # of the 4 prompt tokens, the draft sees [7, 8]
    drafter._start = start
    try:
        for i in range(BATCH_N):
            out = near_draft_gen.generate(list(BATCH_PROMPT), TOPK.replace(seed=4000 + i), k=2, chat=False,
                                          proposer="draft")
            counts[tuple(out.token_ids)] += 1
    finally:
        drafter.context_window = None
        del drafter._start
    assert prefilled == {2}  # the window was live
    assert_exact(one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA))
