"""Hand-built cases for rejection_sample (the API in DESIGN.md section 1)."""

import pytest
import torch

from specdecode import rejection_sample


def onehot(idx, V):
    return torch.nn.functional.one_hot(torch.tensor(idx), V).float()


def gen(seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_p_equals_q_accepts_everything_and_adds_bonus():
    torch.manual_seed(0)
    B, k, V = 4, 5, 11
    q = torch.softmax(torch.randn(B, k, V), -1)
    p = torch.cat([q, torch.softmax(torch.randn(B, 1, V), -1)], dim=1)
    drafts = torch.multinomial(q.reshape(-1, V), 1).reshape(B, k)
    tokens, n = rejection_sample(drafts, q, p, gen())
    assert n.tolist() == [k] * B
    assert torch.equal(tokens[:, :k], drafts)
    assert (tokens[:, k] >= 0).all()


def test_disjoint_supports_reject_first_and_emit_from_p():
    V = 6
    q = torch.stack([onehot(0, V) * 0.5 + onehot(1, V) * 0.5] * 3).unsqueeze(0)  # [1,3,V] on {0,1}
    p = torch.stack([onehot(4, V) * 0.25 + onehot(5, V) * 0.75] * 4).unsqueeze(0)  # on {4,5}
    for seed in range(20):
        tokens, n = rejection_sample(torch.tensor([[0, 1, 0]]), q, p, gen(seed))
        assert n.item() == 0
        assert tokens[0, 0].item() in (4, 5)
        assert tokens[0, 1:].tolist() == [-1, -1, -1]


def test_one_hot_p_reproduces_greedy():
    V = 8
    argmaxes = [3, 5, 1, 7]
    p = torch.stack([onehot(a, V) for a in argmaxes]).unsqueeze(0)
    # Drafts agree on the first two, disagree on the third: emit 3, 5, then the target's 1.
    tokens, n = rejection_sample(torch.tensor([[3, 5, 2]]), None, p, gen())
    assert n.item() == 2
    assert tokens.tolist() == [[3, 5, 1, -1]]
    # All agree: bonus is the fourth argmax.
    tokens, n = rejection_sample(torch.tensor([[3, 5, 1]]), None, p, gen())
    assert tokens.tolist() == [[3, 5, 1, 7]] and n.item() == 3


def test_q_zero_where_p_positive_accepts_and_residual_covers_it():
    V = 4
    # The draft put no mass on token 2; p does. A draft of token 0 with p(0) = 0 is always rejected,
    # and the residual max(0, p - q) must then be able to produce token 2.
    q = onehot(0, V).reshape(1, 1, V)
    p = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]]])
    tokens, n = rejection_sample(torch.tensor([[0]]), q, p, gen())
    assert n.item() == 0 and tokens.tolist() == [[2, -1]]
    # A drafted token with q(x) = 0 but p(x) > 0 is accepted (ratio +inf).
    q = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]])
    p = torch.tensor([[[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]])
    tokens, n = rejection_sample(torch.tensor([[2]]), q, p, gen())
    assert n.item() == 1 and tokens.tolist() == [[2, 3]]


def test_ragged_rows_are_padded_with_minus_one():
    V = 5
    p = torch.stack([torch.stack([onehot(i, V) for i in (1, 2, 3)]), torch.stack([onehot(i, V) for i in (1, 4, 4)])])
    drafts = torch.tensor([[1, 2], [0, 0]])
    tokens, n = rejection_sample(drafts, None, p, gen())
    assert n.tolist() == [2, 0]
    assert tokens.tolist() == [[1, 2, 3], [1, -1, -1]]


def test_k_zero_is_plain_sampling():
    p = torch.tensor([[[0.0, 1.0, 0.0]]])
    tokens, n = rejection_sample(torch.zeros((1, 0), dtype=torch.long), None, p, gen())
    assert tokens.tolist() == [[1]] and n.tolist() == [0]


def test_per_row_generators_make_rows_independent_of_batch():
    torch.manual_seed(1)
    V, k = 7, 3
    q = torch.softmax(torch.randn(3, k, V), -1)
    p = torch.softmax(torch.randn(3, k + 1, V), -1)
    drafts = torch.multinomial(q.reshape(-1, V), 1).reshape(3, k)
    alone, n_alone = rejection_sample(drafts[1:2], q[1:2], p[1:2], [gen(42)])
    batched, n_batched = rejection_sample(drafts, q, p, [gen(7), gen(42), gen(9)])
    assert torch.equal(alone[0], batched[1]) and n_alone[0] == n_batched[1]


def test_bad_shapes_are_clear_errors():
    with pytest.raises(ValueError, match=r"target_probs must be \[B, k\+1, V\]"):
        rejection_sample(torch.zeros((1, 2), dtype=torch.long), None, torch.rand(1, 2, 5))
    with pytest.raises(ValueError, match="draft_probs must be"):
        rejection_sample(torch.zeros((1, 2), dtype=torch.long), torch.rand(1, 2, 4), torch.rand(1, 3, 5))


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("with_q", [False, True])
def test_greedy_shortcut_equals_the_rule_with_one_hot_p(rule, with_q):
    """Greedy rows skip the rejection step's one-hot and random draws (verifier.greedy_verdict):
    the shortcut must give the tokens, acceptance and chances the rule itself gives."""
    from specdecode.sampling.params import SamplingParams, probs_from_logits
    from specdecode.verification.block import block_rejection_sample
    from specdecode.verification.verifier import greedy_verdict

    reject = {"token": rejection_sample, "block": block_rejection_sample}[rule]
    torch.manual_seed(1)
    V, k = 7, 4
    seen_accept, seen_reject = set(), set()
    for case in range(200):
        logits = torch.randn(k + 1, V)
        best = logits.argmax(-1)
        # Each draft is the argmax or not, at random, so every position is both kept and refused.
        drafts = [int(best[i]) if torch.rand(()) < 0.6 else int((best[i] + 1 + case) % V) for i in range(k)]
        if int(drafts[0]) == int(best[0]) and case % 5 == 0:
            drafts[0] = int((best[0] + 1) % V)
        q = onehot(drafts, V).unsqueeze(0) if with_q else None
        p = probs_from_logits(logits, SamplingParams(temperature=0.0)).unsqueeze(0)
        tokens, n = reject(torch.tensor([drafts]), q, p, gen(case))
        n = int(n[0])
        fast = greedy_verdict(logits, drafts)
        assert fast.accepted == n
        assert fast.tokens == tokens[0, : n + 1].tolist()
        assert fast.chances == [float(p[0, i, x]) for i, x in enumerate(drafts)]
        (seen_accept if n == k else seen_reject).add(n)
    assert seen_accept and len(seen_reject) >= 3  # the cases reached full acceptance and several cut points
