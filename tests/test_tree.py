"""Tree drafting (tree.py): the multi-candidate walk emits exactly the target's distribution, for any
tree shape and kind of candidate, through the toy tables and through the engine on tiny models.

Toy checks: N = 20,000 sequences of L = 3 tokens over V = 4 (at most 64 cells), chi-square at
ALPHA = 1e-3 against the exact joint. The sample size comes from the power wanted: a sampler off by
a total variation d has non-centrality at least N * (2d)^2 (Cauchy-Schwarz on sum (dp)^2 / p), so at
N = 20,000 and 63 degrees of freedom a TV of 0.04 is caught with power 0.99997 (0.03: 0.95; computed
with scipy.stats.ncx2); the controls below must show a TV above 0.04, and a correct walk fails a
single check with probability 1e-3.
Engine checks: 1,500 seeded requests (as the chain's batched-engine test), 3 tokens each.
"""

from collections import Counter

import pytest
import torch

import tiny
from specdecode.policy.knobs import TreeKnobs
import toy
from specdecode.checks.goodness import one_sample
from specdecode.engine.request import Request
from specdecode.sampling.params import InvalidParameter, SamplingParams, probs_from_logits
from specdecode.verification.tree import exact_residual, trie, trim, walk, walk_invariant

ALPHA = 1e-3
N = 20_000
L = 3
V = 4


def assert_exact(result):
    assert result.p_value >= ALPHA, result
    assert result.tv_distance <= result.tv_bound, result


# -- the toy: conditional tables, a tree per pass, the real walk ---------------------------------

def draft_tree(context, Q, params, kind, gen):
    """A depth-2 tree after `context`: two candidates at the root, two under the first.
    kind: random (both drawn from q, duplicates allowed), deterministic (q's top two, one-hot),
    mixed (the first drawn from q, the second q's best other token, one-hot)."""
    tokens, parents, rows = [], [], []

    def q_at(path):
        seq = list(context) + path
        return probs_from_logits(Q[seq[-2], seq[-1]], params)

    def add(parent, path):
        q = q_at(path)
        for j in range(2):
            if kind == "random" or (kind == "mixed" and j == 0):
                x = int(torch.multinomial(q, 1, generator=gen))
                row = q
            else:
                order = torch.argsort(q, descending=True).tolist()
                taken = [tokens[i] for i, par in enumerate(parents) if par == parent]
                x = next(t for t in order if t not in taken)
                row = torch.nn.functional.one_hot(torch.tensor(x), V).float()
            tokens.append(x)
            parents.append(parent)
            rows.append(row)

    add(-1, [])
    add(0, [tokens[0]])
    return tokens, parents, torch.stack(rows)


def simulate(P, Q, kind, seed, params, q_params=None, residual=exact_residual, n=N):
    gen = torch.Generator().manual_seed(seed)
    q_params = q_params or params
    counts = Counter()
    for _ in range(n):
        seq = [V, V]
        while len(seq) < 2 + L:
            tokens, parents, probs = draft_tree(seq, Q, q_params, kind, gen)
            contexts = [seq] + [seq + [tokens[i] for i in _path(parents, i)] for i in range(len(tokens))]
            p = torch.stack([probs_from_logits(P[c[-2], c[-1]], params) for c in contexts])
            emitted, _ = walk(tokens, parents, probs, p, gen, residual)
            seq += emitted
        counts[tuple(seq[2: 2 + L])] += 1
    return counts


def _path(parents, i):
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def tables(seed=0):
    return toy.random_table(V, seed), toy.random_table(V, seed + 100)


T1 = SamplingParams(temperature=1.0)


@pytest.mark.parametrize("kind", ["random", "deterministic", "mixed"])
def test_walk_is_exact(kind):
    P, Q = tables()
    counts = simulate(P, Q, kind, seed=1, params=T1)
    assert_exact(one_sample(counts, toy.exact_joint(P, T1, L), alpha=ALPHA))


def test_walk_is_exact_with_q_zero_where_p_is_positive():
    """The draft sees only its top 2 tokens (q = 0 elsewhere) while the target has full support."""
    P, Q = tables(seed=3)
    counts = simulate(P, Q, "mixed", seed=2, params=T1, q_params=SamplingParams(temperature=1.0, top_k=2))
    assert_exact(one_sample(counts, toy.exact_joint(P, T1, L), alpha=ALPHA))


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.7, top_k=3),
                                    SamplingParams(temperature=1.3, top_p=0.8)])
def test_walk_is_exact_under_sampling_transforms_on_both_sides(params):
    P, Q = tables(seed=5)
    counts = simulate(P, Q, "random", seed=3, params=params)
    assert_exact(one_sample(counts, toy.exact_joint(P, params, L), alpha=ALPHA))


def test_duplicate_siblings_are_exact_and_happen():
    """Two candidates drawn from the same q coincide often over 4 tokens; the second try of a
    token the residual no longer holds is then rejected."""
    P, Q = tables(seed=7)
    gen = torch.Generator().manual_seed(0)
    dupes = sum(len(set(t[:2])) == 1 for t in (draft_tree([V, V], Q, T1, "random", gen)[0] for _ in range(500)))
    assert dupes > 50
    counts = simulate(P, Q, "random", seed=4, params=T1)
    assert_exact(one_sample(counts, toy.exact_joint(P, T1, L), alpha=ALPHA))


def _from_p(r, q, p):  # WRONG: after a rejection, start again from the target's p
    return p


def _keep_rejected(r, q, p):  # WRONG for a deterministic candidate: it stays in the residual
    return r


def test_control_residual_from_p_is_rejected():
    P, Q = tables()
    counts = simulate(P, Q, "random", seed=1, params=T1, residual=_from_p)
    result = one_sample(counts, toy.exact_joint(P, T1, L), alpha=ALPHA)
    assert result.p_value < ALPHA and result.tv_distance > 0.04, result


def test_control_forgetting_a_rejected_deterministic_candidate_is_rejected():
    P, Q = tables()
    counts = simulate(P, Q, "deterministic", seed=1, params=T1, residual=_keep_rejected)
    result = one_sample(counts, toy.exact_joint(P, T1, L), alpha=ALPHA)
    assert result.p_value < ALPHA and result.tv_distance > 0.04, result


def test_greedy_walk_takes_the_targets_argmax_path():
    p = torch.zeros((4, 5))
    p[0, 3] = p[2, 1] = p[3, 4] = 1.0  # root -> 3, then after node 1 (token 3) -> 1
    tokens, parents = [2, 3, 1, 0], [-1, -1, 1, 1]
    emitted, path = walk(tokens, parents, None, p)
    assert (emitted, path) == ([3, 1, 4], [1, 2])


def test_invariant_walk_follows_the_picked_tokens():
    p = torch.eye(5)[:4]
    tokens, parents = [0, 1, 2], [-1, -1, 1]
    emitted, path = walk_invariant(tokens, parents, p, lambda probs, depth: [1, 2, 3][depth])
    assert (emitted, path) == ([1, 2, 3], [1, 2])


# -- building and trimming trees ---------------------------------------------------------------

def test_trie_puts_the_most_frequent_path_first_and_keeps_parents_before_children():
    conts = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 7], [1, 2, 3]]
    tokens, parents, shares = trie(conts, depth=3, budget=6)
    assert tokens[:3] == [1, 2, 3] and parents[:3] == [-1, 0, 1]
    assert shares[0] == pytest.approx(4 / 5) and shares[1] == pytest.approx(3 / 4)
    assert all(p < i for i, p in enumerate(parents)) and len(tokens) == 6
    # the rest by count, shallower first: 5 at the root, then 5's 6 (an older occurrence) and 1's 7
    assert set(zip(tokens[3:], parents[3:])) == {(5, -1), (6, 3), (7, 0)}


def test_trim_keeps_the_chain_and_adds_branches_only_where_they_pay():
    parents, shares = [-1, 0, -1, 0], [0.9, 0.9, 0.5, 0.3]
    flat = trim(parents, shares, [0.8] * 4, lambda w: 1.0)  # a flat pass: every branch pays
    steep = trim(parents, shares, [0.8] * 4, lambda w: float(w))  # a pass that grows with width
    assert flat == [0, 1, 2, 3]
    assert steep[:2] == [0, 1] and len(steep) < 4


# -- through the engine, on tiny models ----------------------------------------------------------

TOPK = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=3, ignore_eos=True, sampler="standard")
TOPP = SamplingParams(temperature=1.0, top_k=3, top_p=0.9, max_new_tokens=3, ignore_eos=True, sampler="standard")
BATCH_N = 1500


def engine_samples(gen, prompt, params, proposer, k=2, tree=6, n=BATCH_N):
    reqs = [Request(list(prompt), params.replace(seed=5000 + i), k=k, proposer=proposer, tree=tree) for i in range(n)]
    # Every branch kept, whatever the costs earlier tests left measured (tree.trim is tested above).
    with gen.configured(load_policy=False, cost_rule=False, max_waiting=n):
        for req in reqs:
            gen.submit(req)
        gen.run_until_idle()
    assert all(r.finish_reason == "length" for r in reqs)
    stats = [r.stats.tree for r in reqs]
    return Counter(tuple(r.generated) for r in reqs), {key: sum(s[key] for s in stats) for key in stats[0]}


def exact_joint(model, prompt, params):
    from test_exactness import exact_model_joint

    return exact_model_joint(model, prompt, params, 3)


def test_engine_draft_tree_joint_distribution(near_draft_gen, target_model):
    counts, tree = engine_samples(near_draft_gen, [5, 6, 7, 8], TOPK, "draft")
    assert tree["passes"] > 500 and tree["other_candidate"] > 20  # second choices were tried and won
    assert_exact(one_sample(counts, exact_joint(target_model, [5, 6, 7, 8], TOPK), alpha=ALPHA))


LOOKUP_PROMPT = [5, 6, 7, 9, 5, 6, 8, 9, 5, 6, 7, 10, 5, 6]  # "5 6" was followed by 7, 8 and 7


@pytest.mark.parametrize("proposer,params", [("ngram", TOPP), ("suffix", TOPP),
                                             ("ngram", TOPP.replace(sampler="invariant"))])
def test_engine_lookup_tree_joint_distribution(near_draft_gen, target_model, proposer, params):
    counts, tree = engine_samples(near_draft_gen, LOOKUP_PROMPT, params, proposer, k=3, tree=8)
    assert tree["passes"] > BATCH_N // 2 and tree["nodes"] > 3 * tree["passes"]
    assert_exact(one_sample(counts, exact_joint(target_model, LOOKUP_PROMPT, params), alpha=ALPHA))


def test_control_engine_tree_with_residual_from_p_is_rejected(near_draft_gen, target_model):
    with near_draft_gen.configured(tree_residual=_from_p):
        counts, _ = engine_samples(near_draft_gen, [5, 6, 7, 8], TOPK, "draft")
    result = one_sample(counts, exact_joint(target_model, [5, 6, 7, 8], TOPK), alpha=ALPHA)
    assert result.p_value < ALPHA, result


@pytest.mark.parametrize("proposer", ["draft", "ngram", "suffix", "hybrid"])
def test_greedy_tree_output_equals_plain(near_draft_gen, proposer):
    # The tiny draft's distributions are flat: let it branch wherever it has a second choice, and
    # keep every branch whatever this machine's measured costs say.
    prompt = [5, 6, 7, 8, 5, 6, 7, 9, 5, 6, 7, 8, 5, 6, 9, 9, 5, 6]
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    plain = near_draft_gen.generate(prompt, greedy, k=0, chat=False).token_ids
    with near_draft_gen.configured(cost_rule=False, tree=TreeKnobs(branch_above=0.0)):
        out = near_draft_gen.generate(prompt, greedy, k=4, chat=False, proposer=proposer, tree=12)
    assert out.token_ids == plain
    assert out.stats["tree"]["passes"] > 0


def test_a_tree_pass_scores_each_path_as_its_own_chain(target_model):
    """Tree attention: each node's logits are those of its path fed as a chain, rows of other
    widths and rolled-back columns beside it, and after prune the row continues from the path."""
    from specdecode.models.backends.hf_batch import BatchRunner

    runner = BatchRunner(target_model)
    runner.add_rows([1, 2, 3, 4, 5], 2)
    runner.forward([[6, 7], [6]])
    runner.rollback([1, 0])
    out = runner.forward([[9, 10, 11, 12], [9, 13]], parents=[[-1, 0, 0, 2], [-1, 0]])

    def chain(prefix, feed):
        ref = BatchRunner(target_model)
        ref.add_rows(prefix)
        return ref.forward([feed])[0]

    base = [1, 2, 3, 4, 5, 6]
    torch.testing.assert_close(out[0][[0, 2, 3]], chain(base, [9, 11, 12]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[0][[0, 1]], chain(base, [9, 10]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1], chain(base, [9, 13]), atol=1e-5, rtol=1e-4)
    runner.prune([[0, 2, 3], [0]])
    after = runner.forward([[20], [21]])
    torch.testing.assert_close(after[0], chain(base + [9, 11, 12], [20]), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(after[1], chain(base + [9], [21]), atol=1e-5, rtol=1e-4)
    assert runner.pos.tolist() == [10, 8]


def test_a_tree_is_refused_where_it_cannot_run(near_draft_gen, tok):
    from specdecode import SpeculativeGenerator
    from specdecode.models.backends.hf_static import StaticRunner
    from specdecode.models.backends.serial import SerialRunner

    with pytest.raises(InvalidParameter, match="verifier 'token'"):
        near_draft_gen.generate([5, 6], SamplingParams(max_new_tokens=2), tree=4, verifier="block", chat=False)
    with pytest.raises(InvalidParameter, match=r"\[0, 64\]"):
        near_draft_gen.generate([5, 6], SamplingParams(max_new_tokens=2), tree=-1, chat=False)
    chains_only = SpeculativeGenerator.from_models(SerialRunner(StaticRunner(tiny.model(), initial=64)), tok, "ngram")
    with pytest.raises(InvalidParameter, match="scores chains only"):
        chains_only.generate([5, 6], SamplingParams(max_new_tokens=2), tree=4, chat=False)
    assert chains_only.generate([5, 6], SamplingParams(max_new_tokens=2), chat=False).token_ids


def test_trie_can_put_the_proposers_own_chain_first():
    conts = [[1, 7, 8], [1, 2, 3], [1, 2, 3], [5, 6]]
    tokens, parents, _ = trie(conts, depth=3, budget=6, chain=[1, 7, 8])  # the latest match's continuation
    assert tokens[:3] == [1, 7, 8] and parents[:3] == [-1, 0, 1]
    assert (2, 0) in set(zip(tokens[3:], parents[3:]))  # the most frequent path still branches off
