"""Block verification: exact (by enumeration and statistically), never worse than token-level
verification in expected accepted tokens, and wired through the engine, CLI and server."""

import itertools

import pytest
import torch

import toy
from specdecode import SamplingParams
from specdecode.rejection import block_rejection_sample  # the public name (verification/block.py holds it)
from specdecode.verification.draws import check_shapes, sample_rows, uniform
from specdecode.verification.rejection import rejection_sample
from test_exactness import ALPHA, L, N, T1, assert_exact, check, tables


def wrong_block_rule(draft_tokens, draft_probs, target_probs, generator=None):
    """vllm-ascend's rule before its fix: the block's weights as the acceptance test, but the plain
    token-level residual max(0, p - q) after a rejection. Kept to show that the tests catch it."""
    B, k = draft_tokens.shape
    check_shapes(draft_tokens, draft_probs, target_probs)
    p = target_probs.double()
    q = draft_probs.double()
    rows = torch.arange(B)
    p_x = p[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    q_x = q.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    w = torch.cumprod(torch.clamp(p_x / q_x, max=1.0), dim=1)
    eta = uniform((B, k), generator, p.device)
    tau = torch.where(eta < w, torch.arange(1, k + 1).expand(B, k), torch.zeros(B, k, dtype=torch.long)).max(1).values
    p_next = p[rows, tau]
    residual = (p_next - q[rows, tau.clamp(max=k - 1)]).clamp(min=0)
    weights = torch.where((tau < k).unsqueeze(-1), residual, p_next)
    tokens = torch.full((B, k + 1), -1, dtype=torch.long)
    keep = torch.arange(k).unsqueeze(0) < tau.unsqueeze(1)
    tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows, tau] = sample_rows(weights, generator)
    return tokens, tau


# -- exact, by enumerating every draft and every acceptance outcome ---------------------------------

def enumerate_block_rule(P, Q, V, k):
    """The block rule's output distribution over k+1 tokens (extended by the target where it emits
    fewer), computed exactly from the algorithm's probabilities, not sampled."""
    out = {}

    def extend(seq, pr):
        if len(seq) == k + 1:
            out[seq] = out.get(seq, 0.0) + pr
            return
        for z in range(V):
            extend(seq + (z,), pr * float(P(seq)[z]))

    for drafts in itertools.product(range(V), repeat=k):
        p_draft = 1.0
        for i, x in enumerate(drafts):
            p_draft *= float(Q(drafts[:i])[x])
        if p_draft == 0:
            continue
        w, h = [1.0], []
        for i, x in enumerate(drafts):
            w.append(min(1.0, w[-1] * float(P(drafts[:i])[x]) / float(Q(drafts[:i])[x])))
        for i in range(1, k):
            m = float((w[i] * P(drafts[:i]) - Q(drafts[:i])).clamp(min=0).sum())
            h.append(m / (m + 1 - w[i]) if m + 1 - w[i] > 0 else 1.0)
        h.append(w[k])
        for tau in range(k + 1):
            pr = (h[tau - 1] if tau else 1.0)
            for j in range(tau + 1, k + 1):
                pr *= 1 - h[j - 1]
            if tau == k:
                nxt = P(drafts)
            else:
                nxt = (w[tau] * P(drafts[:tau]) - Q(drafts[:tau])).clamp(min=0)
                nxt = nxt / nxt.sum() if nxt.sum() > 0 else P(drafts[:tau])
            for y in range(V):
                extend(drafts[:tau] + (y,), p_draft * pr * float(nxt[y]))
    return out


def context_tables(V, seed, sharp_p, sharp_q):
    gen = torch.Generator().manual_seed(seed)
    cache = {}

    def table(which, sharp):
        def dist(prefix):
            key = (which, prefix)
            if key not in cache:
                x = torch.rand(V, generator=gen, dtype=torch.float64) ** sharp
                cache[key] = x / x.sum()
            return cache[key]
        return dist

    return table("p", sharp_p), table("q", sharp_q)


@pytest.mark.parametrize("V,k,seed", [(3, 3, 1), (4, 3, 5), (2, 4, 9)])
def test_block_rule_is_exact_by_enumeration(V, k, seed):
    P, Q = context_tables(V, seed, 1.0, 0.5)
    got = enumerate_block_rule(P, Q, V, k)
    for seq in itertools.product(range(V), repeat=k + 1):
        exact = 1.0
        for i, x in enumerate(seq):
            exact *= float(P(seq[:i])[x])
        assert abs(got.get(seq, 0.0) - exact) < 1e-12, seq


# -- statistically, through the batched implementation ----------------------------------------------

@pytest.mark.parametrize("k", [1, 3, 6])
def test_different_p_and_q(k):
    P, Q = tables(seed=2)
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=110 + k, params=T1, rejection=block_rejection_sample), P, T1))


@pytest.mark.parametrize("k", [1, 3])
def test_q_zero_where_p_positive_and_disjoint_supports(k):
    P, Q = tables(V=6, seed=3)
    Q[..., 0] = float("-inf")
    P[..., 0] += 1.5
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=120 + k, params=T1, rejection=block_rejection_sample), P, T1))
    P, Q = tables(V=6, seed=3)
    P[..., 3:] = float("-inf")
    Q[..., :3] = float("-inf")
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=125 + k, params=T1, rejection=block_rejection_sample), P, T1))


@pytest.mark.parametrize("k", [1, 3])
def test_deterministic_drafts_and_sampling_transforms(k):
    P, Q = tables(V=4, seed=6)
    counts = toy.simulate(P, Q, k, N, L, seed=130 + k, params=T1, deterministic=True, rejection=block_rejection_sample)
    assert_exact(check(counts, P, T1))
    params = SamplingParams(temperature=0.8, top_k=3, top_p=0.9)
    P, Q = tables(V=5, seed=7)
    assert_exact(check(toy.simulate(P, Q, k, N, L, seed=135 + k, params=params, rejection=block_rejection_sample),
                       P, params))


def test_control_wrong_block_rule_is_rejected():
    P, Q = tables(V=4, seed=2)
    result = check(toy.simulate(P, Q, 3, N, L, seed=140, params=T1, rejection=wrong_block_rule), P, T1)
    assert result.p_value < ALPHA, result


def test_never_fewer_accepted_tokens_than_token_level():
    """The same drafts and targets, 20,000 rows: the block rule accepts more on average, by more than
    three standard errors of the difference."""
    torch.manual_seed(0)
    B, k, V = 20_000, 4, 6
    p = torch.softmax(torch.randn(B, k + 1, V) * 1.5, -1)
    q = torch.softmax(torch.randn(B, k, V) * 1.5, -1)
    d = torch.multinomial(q.reshape(-1, V), 1).reshape(B, k)
    _, token = rejection_sample(d, q, p, torch.Generator().manual_seed(1))
    _, block = block_rejection_sample(d, q, p, torch.Generator().manual_seed(2))
    diff = block.double().mean() - token.double().mean()
    se = (block.double().var() / B + token.double().var() / B).sqrt()
    assert diff > 3 * se, (float(diff), float(se))


def test_shapes_padding_and_per_row_generators():
    torch.manual_seed(3)
    B, k, V = 5, 4, 9
    q = torch.softmax(torch.randn(B, k, V), -1)
    p = torch.softmax(torch.randn(B, k + 1, V), -1)
    d = torch.multinomial(q.reshape(-1, V), 1).reshape(B, k)
    tokens, n = block_rejection_sample(d, q, p, [torch.Generator().manual_seed(s) for s in range(B)])
    assert tokens.shape == (B, k + 1) and n.shape == (B,)
    for b in range(B):
        assert tokens[b, : n[b]].tolist() == d[b, : n[b]].tolist() and tokens[b, n[b]] >= 0
        assert (tokens[b, n[b] + 1:] == -1).all()
    again, _ = block_rejection_sample(d[[3]], q[[3]], p[[3]], [torch.Generator().manual_seed(3)])
    assert torch.equal(again[0], tokens[3])  # row 3 is independent of its batch
    empty, none = block_rejection_sample(d[:, :0], None, p[:, :1])
    assert empty.shape == (B, 1) and (none == 0).all()
    with pytest.raises(ValueError, match="target_probs must be"):
        block_rejection_sample(d, q, p[:, :2])


# -- through the engine ------------------------------------------------------------------------------

def test_engine_block_verifier_is_exact_greedy_and_per_request(small_draft_gen, near_draft_gen):
    greedy = SamplingParams(max_new_tokens=30, ignore_eos=True)
    for gen in (small_draft_gen, near_draft_gen):
        plain = gen.generate("def f(x):", greedy, k=0, chat=False, proposer="none").token_ids
        for proposer, k in (("draft", 3), ("ngram", 4), ("hybrid", "auto")):
            out = gen.generate("def f(x):", greedy, k=k, chat=False, proposer=proposer, verifier="block")
            assert out.token_ids == plain, (proposer, k)
    with pytest.raises(ValueError, match="verifier must be token or block"):
        small_draft_gen.generate("x", greedy, verifier="tree")
    with pytest.raises(ValueError, match="a tree is walked with the multi-candidate token rule"):
        small_draft_gen.generate("x", greedy, tree=8, verifier="block")


def test_engine_block_joint_distribution(near_draft_gen, target_model):
    from collections import Counter

    from specdecode.checks.goodness import one_sample
    from test_exactness import BATCH_PROMPT, TOPK, exact_model_joint

    counts = Counter()
    for i in range(1500):
        out = near_draft_gen.generate(list(BATCH_PROMPT), TOPK.replace(seed=5000 + i), k=3, chat=False,
                                      proposer="draft", verifier="block")
        counts[tuple(out.token_ids)] += 1
    assert_exact(one_sample(counts, exact_model_joint(target_model, BATCH_PROMPT, TOPK, 3), alpha=ALPHA))
