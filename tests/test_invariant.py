"""Drafter-invariant sampling: a seed means the same tokens for every proposer, k and batch, and the
tokens still follow the target's distribution."""

import itertools
from collections import Counter

import pytest
import torch

from specdecode import SamplingParams
from specdecode.verification import invariant
from specdecode.checks.goodness import one_sample
from specdecode.engine.request import Request

T1 = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7], [40, 41], [3], [100, 101, 102, 100, 101]]


def plain(gen, prompt, params):
    return gen.generate(prompt, params, k=0, chat=False, proposer="none").token_ids


def test_noise_is_keyed_by_seed_and_position_alone():
    a, b = invariant.exponentials(7, 3, 1000), invariant.exponentials(7, 3, 1000)
    assert torch.equal(a, b)
    assert not torch.equal(a, invariant.exponentials(7, 4, 1000)) and not torch.equal(a, invariant.exponentials(8, 3, 1000))
    # g = -log E is Gumbel(0, 1): mean = Euler's constant, variance pi^2 / 6 (100k draws: both within a few s.e.).
    g = -torch.log(invariant.exponentials(1, 0, 100_000))
    assert abs(float(g.mean()) - 0.5772) < 0.02 and abs(float(g.var()) - 1.6449) < 0.05


@pytest.mark.parametrize("seed", range(12))
def test_every_proposer_and_k_gives_the_plain_seeded_tokens(small_draft_gen, near_draft_gen, twin_gen, seed):
    params = T1.replace(seed=seed)
    prompt = PROMPTS[seed % len(PROMPTS)]
    expected = plain(near_draft_gen, prompt, params)
    for gen in (small_draft_gen, near_draft_gen, twin_gen):
        assert plain(gen, prompt, params) == expected  # the same target behind all three
        for proposer, k in itertools.product(("draft", "ngram", "hybrid"), (*range(1, 9), "auto")):
            out = gen.generate(prompt, params, k=k, chat=False, proposer=proposer)
            assert out.token_ids == expected, (proposer, k)


def test_batches_with_rows_joining_mid_flight_and_the_load_policy_on(near_draft_gen):
    """Seeded rows beside other traffic, rows joining every step, and the load policy choosing k from
    measured costs: each row still gets the plain seeded tokens."""
    reqs = [Request(list(PROMPTS[i % 4]), T1.replace(seed=100 + i), k=[1, 4, 8, "auto"][i % 4],
                    proposer=["draft", "ngram", "hybrid", "none"][i % 4]) for i in range(12)]
    for batch in (1, 2, 3, 5, 8):
        with near_draft_gen.configured(max_batch=batch, load_policy=True):
            fresh = [Request(list(r.prompt_ids), r.params, k=r.k, proposer=r.proposer) for r in reqs]
            for i, req in enumerate(fresh):
                near_draft_gen.submit(req)
                if i % 3 == 2:
                    near_draft_gen.step()
            near_draft_gen.run_until_idle()
        for req in fresh:
            assert req.generated == plain(near_draft_gen, req.prompt_ids, req.params), (batch, req.proposer, req.k)


def test_the_standard_rule_is_what_seeds_choose_only_when_asked(near_draft_gen):
    """sampler="standard" keeps the rejection rule: a seeded request then depends on k."""
    params = T1.replace(seed=5, sampler="standard", max_new_tokens=24)
    runs = {tuple(near_draft_gen.generate(PROMPTS[0], params, k=k, chat=False, proposer="draft").token_ids)
            for k in (1, 2, 3, 4, 6, 8)}
    assert len(runs) > 1
    with pytest.raises(ValueError, match="sampler must be one of"):
        SamplingParams(sampler="gumbel")


# -- the distribution: invariant speculative output follows the target's joint distribution ----------

N = 1500
PROMPT = [5, 6, 7, 8]
TOPK = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=3, ignore_eos=True, sampler="invariant")


def joint_counts(gen, proposer="draft", k=2):
    counts = Counter()
    for seed in range(N):
        counts[tuple(gen.generate(list(PROMPT), TOPK.replace(seed=seed), k=k, chat=False,
                                  proposer=proposer).token_ids)] += 1
    return counts


@pytest.fixture(scope="module")
def exact(target_model):
    from test_exactness import exact_model_joint

    return exact_model_joint(target_model, PROMPT, TOPK, 3)


@pytest.mark.parametrize("proposer,k", [("draft", 2), ("hybrid", 3)])
def test_invariant_joint_distribution(near_draft_gen, exact, proposer, k):
    from test_exactness import ALPHA, assert_exact

    assert_exact(one_sample(joint_counts(near_draft_gen, proposer, k), exact, alpha=ALPHA))


def test_control_noise_reused_across_positions_is_rejected(near_draft_gen, exact, monkeypatch):
    """The same noise at every position couples the tokens of a sequence: the test must catch it."""
    from test_exactness import ALPHA

    real = invariant.exponentials
    monkeypatch.setattr(invariant, "exponentials", lambda seed, position, width: real(seed, 0, width))
    import specdecode.engine.row as row_module

    monkeypatch.setattr(row_module, "exponentials", invariant.exponentials)
    result = one_sample(joint_counts(near_draft_gen), exact, alpha=ALPHA)
    assert result.p_value < ALPHA, result


def test_invariant_acceptance_of_a_sampled_draft_is_lower_but_real(near_draft_gen):
    """What the invariance costs: a sampled draft agrees with the target's Gumbel-max token less
    often than the standard rule accepts it, and still far more often than never."""
    rates = {}
    for sampler in ("standard", "invariant"):
        accepted = drafted = 0
        for seed in range(60):
            s = near_draft_gen.generate(PROMPTS[0], T1.replace(seed=seed, sampler=sampler), k=3, chat=False,
                                        proposer="draft").stats
            accepted, drafted = accepted + s["accepted_tokens"], drafted + s["drafted_tokens"]
        rates[sampler] = accepted / drafted
    assert 0.2 < rates["invariant"] < rates["standard"], rates


def reference_race(probs, exp):
    """The race as float64 runs it over the whole vocabulary."""
    return int((probs.double() / exp[: probs.shape[-1]]).argmax())


def test_the_quick_race_picks_the_float64_winner():
    """race_argmax runs float32 over the vocabulary and float64 over the leaders only: it must pick
    exactly the token the float64 race over everything picks, ties and zeros included."""
    gen = torch.Generator().manual_seed(0)
    cases = 0
    for trial in range(400):
        width = 50_000 if trial % 4 else 257
        logits = torch.randn(width, generator=gen) * float(torch.rand(1, generator=gen) * 12)
        probs = torch.softmax(logits, -1)
        if trial % 3 == 0:
            probs[torch.rand(width, generator=gen) < 0.5] = 0.0  # a top-k/top-p cut
        noise = invariant.RaceNoise.of(invariant.exponentials(trial, trial % 7, width + 5))
        if trial % 5 == 0:
            # An exact float64 tie between the winner and a later token: the first index wins.
            w = reference_race(probs, noise.exp)
            other = (w + 1 + trial) % width
            exp = noise.exp.clone()
            probs[other] = probs[w]
            exp[other] = exp[w]
            noise = invariant.RaceNoise.of(exp)
        assert invariant.race_argmax(probs, noise) == reference_race(probs, noise.exp)
        cases += 1
    assert cases == 400
    # A distribution with a NaN (an overflowing penalty upstream) is raced as float64 races it.
    probs = torch.softmax(torch.randn(300, generator=gen), -1)
    probs[17] = float("nan")
    noise = invariant.RaceNoise.of(invariant.exponentials(0, 0, 300))
    assert invariant.race_argmax(probs, noise) == reference_race(probs, noise.exp)


def test_control_a_float32_race_alone_is_caught():
    """The comparison above can fail: near-ties that float32 rounds the other way are built here, and
    a race in float32 alone gets some of them wrong."""
    wrong = 0
    for trial in range(200):
        width = 1000
        exp = invariant.exponentials(trial, 0, width)
        probs = torch.full((width,), 1e-6)
        a, b = 3, 700
        probs[a] = 0.4
        # b's exact value p_b / E_b sits 1e-8 (relative) from a's: below float32's resolution.
        target = (probs[a].double() / exp[a]) * (1 + (1e-8 if trial % 2 else -1e-8))
        probs[b] = float(target * exp[b])
        probs = probs.float()
        f32 = int((probs * exp.reciprocal().float()).argmax())
        wrong += f32 != reference_race(probs, exp)
        assert invariant.race_argmax(probs, invariant.RaceNoise.of(exp)) == reference_race(probs, exp)
    assert wrong > 0
