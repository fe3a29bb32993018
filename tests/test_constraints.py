"""Penalties, logit bias, grammars and logprobs under speculation: exact, and what they report.

Statistical checks follow tests/test_exactness.py: the joint distribution of the first 3 emitted
tokens of N seeded requests through the engine against the exact one computed here, from the target
model and this file's own implementation of the transform (not the library's), chi-square at
ALPHA. N = 1500: with the cells these prompts leave (about 27 at top-k 3), the Bretagnolle-Huber-
Carol bound puts the empirical TV within ~0.11 of the truth at ALPHA, and the controls below move
the distribution by far more than that (they are rejected at p < 1e-10 in practice).
"""

import json
from collections import Counter

import pytest
import torch

import tiny
from test_exactness import ALPHA, assert_exact, exact_model_joint
from specdecode.sampling.constraints import GrammarSpec, PenaltyCounts
from specdecode.checks.goodness import one_sample
from specdecode.engine.request import Request
from specdecode.engine.row import Row
from specdecode.sampling.params import InvalidParameter, SamplingParams

N = 1500
PROMPT = [5, 6, 7, 8]
TOPK = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=3, ignore_eos=True, sampler="standard")
LETTERS = "abcdef"


def exact_joint(model, params, shape):
    return exact_model_joint(model, PROMPT, params, 3, shape)


def run(gen, params, k=2, proposer="draft", **request):
    counts, reqs = Counter(), []
    with gen.configured(load_policy=False):
        for i in range(N):
            req = Request(list(PROMPT), params.replace(seed=5000 + i), k=k, proposer=proposer, **request)
            reqs.append(req)
            gen.submit(req)
            if len(gen.waiting) > 32:
                gen.step()
        gen.run_until_idle()
    for req in reqs:
        assert req.error is None, req.error
        counts[tuple(req.generated)] += 1
    return counts, reqs


# -- grammar: the mask on both sides -------------------------------------------------------------

def letter_ids(tok):
    return [tok.convert_tokens_to_ids(c) for c in LETTERS]


def masked(tok):
    allowed = torch.zeros(tiny.VOCAB, dtype=torch.bool)
    allowed[letter_ids(tok)] = True
    return lambda logits, prefix: logits.masked_fill(~allowed, float("-inf"))


REGEX = GrammarSpec("regex", "[a-f]{3}")


def test_grammar_joint_distribution(near_draft_gen, target_model, tok):
    counts, reqs = run(near_draft_gen, TOPK, grammar=REGEX)
    assert sum(r.stats.accepted_tokens for r in reqs) > 300  # the draft drew from the masked q and was accepted
    assert_exact(one_sample(counts, exact_joint(target_model, TOPK, masked(tok)), alpha=ALPHA))


def test_grammar_with_lookup_drafts_joint_distribution(near_draft_gen, target_model, tok):
    counts, _ = run(near_draft_gen, TOPK, proposer="ngram", grammar=REGEX)
    assert_exact(one_sample(counts, exact_joint(target_model, TOPK, masked(tok)), alpha=ALPHA))


def test_control_mask_on_the_draft_only_is_rejected(near_draft_gen, target_model, tok, monkeypatch):
    """The target's p unmasked (the verifier forgets the grammar): drafts are masked, output is not."""
    monkeypatch.setattr(Row, "shape", lambda self, logits, drafts, parents=None: logits)
    counts, _ = run(near_draft_gen, TOPK, grammar=REGEX)
    result = one_sample(counts, exact_joint(target_model, TOPK, masked(tok)), alpha=ALPHA)
    assert result.p_value < ALPHA, result


def test_mask_on_the_target_only_is_exact_but_wastes_drafts(near_draft_gen, target_model, tok, monkeypatch):
    """The rejection rule is exact for any q the draft really drew from: a draft that ignores the
    grammar only loses acceptance. That is why the mask on q is for speed (the suite checks both)."""
    from specdecode.proposers.draft import DraftModelProposer

    monkeypatch.setattr(DraftModelProposer, "_shape", staticmethod(lambda row, logits, drafted: logits))
    counts, reqs = run(near_draft_gen, TOPK, grammar=REGEX)
    assert_exact(one_sample(counts, exact_joint(target_model, TOPK, masked(tok)), alpha=ALPHA))
    assert sum(r.stats.accepted_tokens for r in reqs) < 100


# -- penalties: counts include the drafts before each position ---------------------------------

PENALISED = TOPK.replace(presence_penalty=2.0, frequency_penalty=2.0, repetition_penalty=3.0)


def penalised(logits, prefix):
    """This file's own reading of the rules: repetition over prompt + output (divide positive
    logits, multiply negative ones), then frequency and presence over the output."""
    out = logits.clone()
    for t in set(PROMPT + prefix):
        out[t] = out[t] / 3.0 if out[t] > 0 else out[t] * 3.0
    for t in set(prefix):
        out[t] -= 2.0 * prefix.count(t) + 2.0
    return out


def test_penalties_joint_distribution(near_draft_gen, target_model):
    counts, reqs = run(near_draft_gen, PENALISED)
    assert sum(r.stats.accepted_tokens for r in reqs) > 300
    assert_exact(one_sample(counts, exact_joint(target_model, PENALISED, penalised), alpha=ALPHA))


def test_control_penalty_counts_without_the_drafts_is_rejected(near_draft_gen, target_model, monkeypatch):
    """The usual bug: every drafted position penalised by the committed text only."""
    real = PenaltyCounts.apply
    monkeypatch.setattr(PenaltyCounts, "apply", lambda self, logits, extra: real(self, logits, []))
    counts, _ = run(near_draft_gen, PENALISED)
    result = one_sample(counts, exact_joint(target_model, PENALISED, penalised), alpha=ALPHA)
    assert result.p_value < ALPHA, result


def test_control_penalty_on_the_draft_only_is_rejected(near_draft_gen, target_model, monkeypatch):
    monkeypatch.setattr(Row, "shape", lambda self, logits, drafts, parents=None: logits)
    counts, _ = run(near_draft_gen, PENALISED)
    result = one_sample(counts, exact_joint(target_model, PENALISED, penalised), alpha=ALPHA)
    assert result.p_value < ALPHA, result


def test_logit_bias_joint_distribution(near_draft_gen, target_model, tok):
    a, b = letter_ids(tok)[:2]
    params = TOPK.replace(logit_bias={a: 30.0, b: 29.0})

    def biased(logits, prefix):
        out = logits.clone()
        out[a] += 30.0
        out[b] += 29.0
        return out

    counts, _ = run(near_draft_gen, params)
    assert_exact(one_sample(counts, exact_joint(target_model, params, biased), alpha=ALPHA))


# -- greedy: speculation changes nothing, token for token ----------------------------------------

@pytest.mark.parametrize("tree", [0, 12])  # a tree's nodes are shaped by the text on their own path
@pytest.mark.parametrize("proposer,k", [("draft", 4), ("ngram", 3), ("suffix", 4), ("hybrid", "auto")])
def test_greedy_constrained_and_penalised_output_equals_plain(small_draft_gen, proposer, k, tree):
    schema = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "tag": {"enum": ["x", "yy"]}},
              "required": ["id", "tag"], "x-guidance": {"whitespace_flexible": False}}
    for params, grammar in ((SamplingParams(max_new_tokens=40), GrammarSpec("json", schema)),
                            (SamplingParams(max_new_tokens=24, presence_penalty=0.8, frequency_penalty=0.5,
                                            repetition_penalty=1.2), None)):
        plain = small_draft_gen.generate("list", params, k=0, grammar=grammar)
        spec = small_draft_gen.generate("list", params, k=k, proposer=proposer, grammar=grammar, tree=tree)
        assert spec.token_ids == plain.token_ids
        if grammar is not None:
            assert set(json.loads(spec.text)) == {"id", "tag"}


def test_constrained_output_always_parses(small_draft_gen):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "n"], "additionalProperties": False,
              "x-guidance": {"whitespace_flexible": False}}
    for seed in range(12):
        out = small_draft_gen.generate("person", SamplingParams(temperature=1.0, seed=seed, max_new_tokens=60),
                                       k=4, grammar=GrammarSpec("json", schema))
        value = json.loads(out.text)
        assert 0 <= value["n"] <= 99 and len(value["name"]) <= 6
        assert out.finish_reason == "stop"
    out = small_draft_gen.generate("pick", SamplingParams(temperature=1.0, seed=1, max_new_tokens=20), k=4,
                                   grammar=GrammarSpec("choice", ["yes", "no", "a.b"]))
    assert out.text in ("yes", "no", "a.b")


def test_lookup_drafts_the_grammar_forbids_are_cut_before_the_target_pass(small_draft_gen, monkeypatch):
    # The prompt repeats "12": the lookup's drafts are digits, which the regex forbids.
    prompt = small_draft_gen.encode("x 12 12 12 12 1", chat=False)
    fed, real = [], small_draft_gen.target.forward
    monkeypatch.setattr(small_draft_gen.target, "forward", lambda feeds, **kw: fed.append(feeds[0]) or real(feeds, **kw))
    out = small_draft_gen.generate(prompt, SamplingParams(max_new_tokens=6, ignore_eos=True), k=4,
                                   proposer="ngram", grammar=GrammarSpec("regex", "[a-z]{6}"))
    assert out.text.isalpha() and len(out.text) == 6
    scored = [t for feed in fed for t in feed[1:]]  # the drafts of each pass (after the row's last token)
    assert all(small_draft_gen.tokenizer.decode([t]).isalpha() for t in scored)
    assert len(fed) == 6 - out.stats["accepted_tokens"]


@pytest.mark.parametrize("spec,problem", [
    (GrammarSpec("json", "{not json"), "not valid JSON"),
    (GrammarSpec("regex", "[a-"), "invalid"),
    (GrammarSpec("grammar", "start: nothing_defined"), "invalid"),
    (GrammarSpec("choice", []), "non-empty list"),
])
def test_a_bad_grammar_is_refused_with_a_message(small_draft_gen, spec, problem):
    with pytest.raises(InvalidParameter, match=problem):
        small_draft_gen.submit(Request([5, 6], SamplingParams(), grammar=spec))


def test_bad_penalties_are_refused():
    for changes, field in (({"presence_penalty": 3}, "presence_penalty"), ({"repetition_penalty": 0}, "repetition"),
                           ({"logit_bias": {"x": 1}}, "logit_bias"), ({"logit_bias": {5: 500}}, "logit_bias")):
        with pytest.raises(InvalidParameter, match=field):
            SamplingParams(**changes)


# -- logprobs: what speculation reports equals what plain decoding reports ----------------------

@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_logprobs_of_speculative_and_plain_decoding_agree(twin_gen, small_draft_gen, mode):
    for gen in (twin_gen, small_draft_gen):  # all drafts accepted / most rejected
        for params in (SamplingParams(max_new_tokens=20), SamplingParams(temperature=0.8, top_p=0.9, seed=3,
                                                                         max_new_tokens=20, presence_penalty=0.5)):
            plain = gen.generate("abc", params, k=0, logprobs=5, logprobs_mode=mode)
            spec = gen.generate("abc", params, k=4, logprobs=5, logprobs_mode=mode)
            assert spec.token_ids == plain.token_ids
            assert len(spec.logprobs) == len(spec.token_ids)
            assert spec.stats["accepted_tokens"] > 0 or gen is small_draft_gen
            for a, b in zip(plain.logprobs, spec.logprobs):
                assert a.token == b.token and abs(a.logprob - b.logprob) < 1e-5
                assert [t for t, _ in a.top] == [t for t, _ in b.top]
                assert all(abs(x - y) < 1e-5 for (_, x), (_, y) in zip(a.top, b.top))


def test_logprobs_are_the_targets(small_draft_gen, target_model):
    out = small_draft_gen.generate([5, 6, 7], SamplingParams(max_new_tokens=6, ignore_eos=True), k=3, chat=False,
                                   logprobs=2)
    logits = tiny.reference_logits(target_model, [5, 6, 7] + out.token_ids, len(out.token_ids) + 1)[:-1]
    expected = torch.log_softmax(logits, -1)
    for j, entry in enumerate(out.logprobs):
        assert abs(entry.logprob - float(expected[j, entry.token])) < 1e-4
        assert entry.top[0][0] == int(expected[j].argmax()) == entry.token  # greedy: the top one


def test_processed_logprobs_follow_the_transform(small_draft_gen):
    params = SamplingParams(temperature=1.0, top_k=2, seed=0, max_new_tokens=8)
    out = small_draft_gen.generate("q", params, k=3, logprobs=3, logprobs_mode="processed")
    for entry in out.logprobs:
        # top-k 2 leaves two tokens: their probabilities sum to one, the third is excluded.
        first, second, third = entry.top
        assert abs(torch.tensor([first[1], second[1]]).exp().sum() - 1) < 1e-5
        assert third[1] == -9999.0
