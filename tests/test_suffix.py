"""The suffix proposer: its index (longest match, most frequent continuation, bounded memory), its
memory across requests and tenants, and exactness through the engine."""

from collections import Counter
from types import SimpleNamespace

import pytest

from specdecode.checks.goodness import one_sample
from specdecode.checks.naive import naive_rejection_sample
from specdecode.proposers import Plan
from specdecode.proposers.suffix import SuffixProposer, band
from specdecode.sampling.params import SamplingParams
from specdecode.proposers.suffix_index import SuffixIndex

from test_exactness import ALPHA, assert_exact, exact_model_joint


def row(context, prompt_len=None, id=0, tenant=None, remember=True):
    return SimpleNamespace(id=id, context=list(context), prompt_ids=list(context[:prompt_len or len(context)]),
                           tenant=tenant, remember=remember)


# -- the index -----------------------------------------------------------------------------------

def test_longest_match_wins_and_the_most_frequent_continuation_is_drafted():
    ix = SuffixIndex()
    ix.add([1, 2, 3, 4, 5, 6, 7])
    ix.add([9, 2, 3, 4, 5, 8, 8])
    ix.add([2, 3, 4, 5, 6, 7, 1])
    # [2, 3] occurs three times; two of them continue 4 5 6 7, so 6 has probability 2/3 there; of
    # those two, one ends after 7 and one goes on with 1: 1/2 more.
    m = ix.lookup([0, 2, 3], 6, factor=3)
    assert (m.length, m.tokens) == (2, [4, 5, 6, 7, 1])
    assert m.probs == pytest.approx([1, 1, 2 / 3, 2 / 3, 1 / 3])
    # [1, 2, 3] occurs once: its own continuation, however rare elsewhere.
    assert ix.lookup([1, 2, 3], 8, factor=3).tokens == [4, 5, 6, 7]
    # Short matches draft short (factor x length), k caps, and min_prob cuts unlikely paths.
    assert ix.lookup([0, 2, 3], 6).tokens == [4, 5]
    assert ix.lookup([0, 2, 3], 1, factor=3).tokens == [4]
    assert ix.lookup([0, 2, 3], 6, factor=3, min_prob=0.5).tokens == [4, 5, 6, 7]
    assert ix.lookup([0, 2, 3], 6, factor=3, min_prob=0.9).tokens == [4, 5]
    # Nothing crosses the end of a sequence; no match, no proposal.
    assert ix.lookup([6, 7], 4).tokens == [1]
    assert ix.lookup([42], 4).length == 0
    apart = SuffixIndex()
    apart.add([1, 2, 3])
    apart.add([4, 5, 6])
    assert apart.lookup([2, 3], 4).tokens == []  # 3 ends its sequence
    assert apart.lookup([9, 3, 4], 4).length == 1  # "3 4" spans two sequences: only "4" matches


def test_ties_go_to_the_most_recent_occurrence():
    ix = SuffixIndex()
    ix.add([1, 2, 3])
    ix.add([1, 2, 4])
    assert ix.lookup([1, 2], 1).tokens == [4]
    ix.add([1, 2, 3])
    assert ix.lookup([1, 2], 1).tokens == [3]


def test_a_growing_sequence_is_searchable_at_once():
    ix = SuffixIndex()
    doc = ix.start()
    ix.extend(doc, [5, 6, 7])
    assert ix.lookup([5, 6, 7], 4).tokens == []  # the current end has no continuation yet
    ix.extend(doc, [8, 5, 6])
    assert ix.lookup([5, 6, 7, 8, 5, 6], 4, factor=2).tokens == [7, 8, 5, 6]
    assert len(ix) == 6


def test_memory_stays_under_its_bound_and_keeps_what_was_useful():
    ix = SuffixIndex(max_tokens=100)
    useful = ix.add([900, 901, 902, 903] * 5)
    for i in range(200):
        ix.add([i, 1000 + i, 2000 + i, 3000 + i, 4000 + i])
        assert len(ix) <= 100
        if i % 5 == 0:  # used now and then: never the least recently useful
            assert ix.lookup([900, 901], 2).tokens == [902, 903]
    assert useful in ix.docs
    assert ix.lookup([3, 1003], 2).tokens == []  # long evicted
    assert ix.lookup([199, 1199], 2).tokens == [2199, 3199]
    assert ix.n < 2 * 100 + 1024 + 25  # the dead part is rebuilt away


def test_a_sequence_longer_than_the_bound_keeps_its_end():
    ix = SuffixIndex(max_tokens=10)
    ix.add(list(range(100)))
    assert len(ix) == 10
    assert ix.lookup([95, 96], 2).tokens == [97, 98] and ix.lookup([5, 6], 2).tokens == []


# -- the proposer ----------------------------------------------------------------------------------

def test_proposes_from_the_request_itself_and_bands_by_match_length():
    p = SuffixProposer(memory_tokens=0)
    r = row([1, 2, 3, 4, 5, 9, 1, 2, 3, 4])
    assert p.propose([r], [Plan(3)])[0].tokens == [5, 9, 1]
    assert p.reach(r, 3) == {**{s: 0 for s in p.sources}, "suffix4": 3}
    assert [band(n) for n in (1, 2, 3, 4, 15, 16, 40)] == ["suffix1", "suffix2", "suffix2", "suffix4", "suffix8",
                                                            "suffix16", "suffix16"]
    r.context += [5]  # the row's index follows its context
    assert p.propose([r], [Plan(2)])[0].tokens == [9, 1]


def test_memory_is_shared_across_requests_and_kept_per_tenant():
    p = SuffixProposer(memory_tokens=1000)
    first = row([7, 7, 1, 2] + [10, 11, 12, 13, 14], prompt_len=4, id=1)
    p.leave([first])  # finished: its output (after its prompt's end) is remembered
    again = row([8, 8, 1, 2], id=2)
    assert p.propose([again], [Plan(4)])[0].tokens == [10, 11]  # factor 1 x a two-token match
    again.context += [10, 11]
    assert p.propose([again], [Plan(4)])[0].tokens == [12, 13, 14]
    assert p.counters["memory_hits"] == 2
    other = row([8, 8, 1, 2], id=3, tenant="b")
    assert p.propose([other], [Plan(4)])[0].tokens == []  # another tenant's memory is its own
    private = row([8, 8, 1, 2], id=5, remember=False)
    assert p.propose([private], [Plan(4)])[0].tokens == []
    p.leave([row([9, 1, 2, 77, 78, 79], prompt_len=3, id=6, remember=False)])
    assert p.propose([row([1, 2], id=7)], [Plan(4)])[0].tokens == [10, 11]  # and leaves nothing behind
    off = SuffixProposer(memory_tokens=0)
    off.leave([first])
    assert off.propose([row([8, 8, 1, 2], id=4)], [Plan(4)])[0].tokens == [] and off.memory_size == 0


def test_a_tree_holds_the_continuations_of_both_the_request_and_the_memory():
    p = SuffixProposer(memory_tokens=1000, factor=2)
    p.leave([row([7, 1, 2, 3, 20, 21], prompt_len=1, id=1)])  # remembered: 1 2 3 -> 20 21
    r = row([1, 2, 3, 30, 31, 5, 1, 2, 3], id=2)  # its own: 1 2 3 -> 30 31
    chain = p.propose([r], [Plan(2)])[0]
    tree = p.propose([r], [Plan(2, nodes=8)])[0]
    assert tree.parents is not None and tree.tokens[:2] == chain.tokens  # the lookup's chain first
    assert {20, 30} <= set(tree.tokens[i] for i, parent in enumerate(tree.parents) if parent < 0)
    private = row(r.context, id=3, remember=False)
    assert p.propose([private], [Plan(2, nodes=8)])[0].parents is None  # without the memory: one path


def test_bad_settings_are_refused():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="suffix memory"):
            SuffixProposer(memory_tokens=bad)
    with pytest.raises(ValueError, match="factor"):
        SuffixProposer(factor=0)


# -- through the engine ------------------------------------------------------------------------------

@pytest.mark.parametrize("proposer", ["suffix", "hybrid-suffix"])
@pytest.mark.parametrize("k", [3, "auto"])
def test_greedy_equals_plain_decoding(twin_gen, proposer, k):
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
    plain = twin_gen.generate(prompt, SamplingParams(max_new_tokens=40, ignore_eos=True), chat=False, proposer="none")
    for _ in range(2):  # the second time the memory holds the first answer
        out = twin_gen.generate(prompt, SamplingParams(max_new_tokens=40, ignore_eos=True), k=k, chat=False,
                                proposer=proposer)
        assert out.token_ids == plain.token_ids
    assert out.stats["accepted_tokens"] > 0


def test_a_repeated_request_drafts_from_memory(target_model, tok):
    from specdecode import SpeculativeGenerator

    gen = SpeculativeGenerator.from_models(target_model, tok, "suffix")
    params = SamplingParams(max_new_tokens=48, ignore_eos=True)
    first = gen.generate("Extract the name as JSON.", params, k=8, chat=False)
    second = gen.generate("Extract the name as JSON.", params, k=8, chat=False)
    assert second.token_ids == first.token_ids
    # The second answer came almost whole from the memory of the first: about 8 drafts accepted a pass.
    assert second.stats["accepted_tokens"] >= 36 and second.stats["target_passes"] <= 48 // 9 + 2, second.stats
    assert gen.proposers["suffix"].counters["memory_hits"] > 0


SUFFIX_PROMPT = [5, 6, 7, 8]
TOPP = SamplingParams(temperature=1.0, top_k=4, top_p=0.9, max_new_tokens=3, ignore_eos=True, sampler="standard")
N = 1500  # the size of the engine suites in test_exactness.py


def suffix_samples(gen, reject=None, proposer="suffix", ks=(2, 3), sources=None, forget_every=N):
    """N seeded requests of one prompt through the engine: after the first few, the memory of the
    earlier answers drafts most of each (its most frequent continuation), the request's own index
    the rest (and, for hybrid-suffix, the draft model where neither matches). The memory is emptied
    every `forget_every` requests; `sources` (a Counter) collects the passes each source drafted."""
    counts = Counter()
    changes = {} if reject is None else {"reject": reject}
    with gen.configured(**changes):
        for i in range(N):
            if i % forget_every == 0:
                gen.proposers["suffix"].forget()
            out = gen.generate(list(SUFFIX_PROMPT), TOPP.replace(seed=5000 + i), k=ks[i % len(ks)], chat=False,
                               proposer=proposer)
            counts[tuple(out.token_ids)] += 1
            if sources is not None:
                sources.update({source.rstrip("0123456789"): c[0] for source, c in out.stats["by_source"].items()})
    return counts


def test_suffix_joint_distribution(near_draft_gen, target_model):
    before = dict(near_draft_gen.proposers["suffix"].counters)
    counts = suffix_samples(near_draft_gen)
    hits = near_draft_gen.proposers["suffix"].counters["memory_hits"] - before["memory_hits"]
    assert hits > N // 2  # the memory drafted, often
    assert_exact(one_sample(counts, exact_model_joint(target_model, SUFFIX_PROMPT, TOPP, 3), alpha=ALPHA))


def test_hybrid_suffix_joint_distribution(near_draft_gen, target_model):
    """The default proposer: memory and own-index drafts (one-hot q) and draft-model drafts (sampled
    q) in one request stream, at fixed k and k=auto."""
    sources = Counter()
    # A memory emptied every other request: the draft model drafts the request after, the memory the next.
    counts = suffix_samples(near_draft_gen, proposer="hybrid-suffix", ks=(2, 3, "auto"), sources=sources,
                            forget_every=2)
    assert sources["suffix"] > N // 4 and sources["draft"] > N // 4, sources  # both kinds drafted
    assert_exact(one_sample(counts, exact_model_joint(target_model, SUFFIX_PROMPT, TOPP, 3), alpha=ALPHA))


def test_control_suffix_with_naive_residual_is_rejected(near_draft_gen, target_model):
    counts = suffix_samples(near_draft_gen, reject=naive_rejection_sample)
    result = one_sample(counts, exact_model_joint(target_model, SUFFIX_PROMPT, TOPP, 3), alpha=ALPHA)
    assert result.p_value < ALPHA, result
