"""The draft vocabulary shortlist (shortlist.py): which tokens, the widened logits, exactness through
the engine with q zero outside the list (a chi-square test at the size and level of the engine
suites in test_exactness.py, with a negative control), and the llama.cpp draft's shortlisted GGUF
on the bundled model."""

import copy
from collections import Counter

import numpy as np
import pytest
import torch

import tiny
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models import shortlist
from specdecode.models.backends import llamacpp
from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.checks.goodness import one_sample
from specdecode.models.registry import ModelError
from specdecode.checks.naive import naive_rejection_sample

from test_exactness import ALPHA, BATCH_N, assert_exact, exact_model_joint

PROMPT = [5, 6, 7, 8]
TOPP = SamplingParams(temperature=1.0, top_k=4, top_p=0.9, max_new_tokens=3, ignore_eos=True, sampler="standard")


def test_the_list_keeps_bytes_and_specials_then_the_most_frequent():
    counts = np.zeros(300, dtype=np.int64)
    counts[[290, 280, 270]] = [5, 9, 9]
    ids = shortlist.choose(counts, 3, always=[299])
    assert ids.tolist() == [270, 280, 299]  # ties by id; 290 is fourth
    assert shortlist.choose(counts, 4, always=[299]).tolist() == [270, 280, 290, 299]
    # Unseen tokens fill by id (merge order).
    assert shortlist.choose(counts, 6, always=[1]).tolist() == [0, 1, 2, 270, 280, 290]
    with pytest.raises(ModelError, match="no shorter than the vocabulary"):
        shortlist.choose(counts, 300, always=[])
    with pytest.raises(ModelError, match="cannot hold"):
        shortlist.choose(counts, 2, always=[297, 298, 299])


def test_the_real_tokenizers_list_covers_its_text(tok):
    from specdecode.models.registry import resolve
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained(str(resolve("default", "draft").path))
    ids = shortlist.shortlist_for(real, 151936, 32768, byte_tokens=True)
    assert len(ids) == 32768 and set(real.all_special_ids) | set(range(256)) <= set(ids.tolist())
    text = ("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"
            "The quick brown fox jumps over the lazy dog, and then it writes a summary of the article.")
    # 23 of these 25 tokens are in (" fibonacci" is not: the corpus never says it); the bench's
    # acceptance, not this, is what says whether a list is long enough.
    assert shortlist.coverage(ids, real(text)["input_ids"]) > 0.85
    assert set(real(" return self.value if n else None")["input_ids"]) <= set(ids.tolist())


def test_widened_logits_are_the_sliced_heads_and_minus_inf_elsewhere(target_model):
    ids = np.arange(0, tiny.VOCAB, 2)
    full = BatchRunner(target_model)
    short = shortlist.Shortlisted(BatchRunner(shortlist.slice_head(copy.deepcopy(target_model), ids)), ids, tiny.VOCAB)
    for runner in (full, short):
        runner.add_rows([5, 6, 7])
    a, b = full.forward([[8, 9]])[0], short.forward([[8, 9]])[0]
    assert b.shape == a.shape
    assert torch.allclose(b[:, ids], a[:, ids], atol=1e-5)
    assert torch.isinf(b[:, 1::2]).all() and (b[:, 1::2] < 0).all()
    assert short.length(0) == 5 and short.backend == "torch" and short.shortlist == len(ids)


def shortlisted_gen(target_model, tok):
    """The near draft (test conftest) scoring only a list that leaves out, among others, the
    target's most likely first token after PROMPT: q = 0 where p is largest."""
    draft = copy.deepcopy(target_model)
    with torch.no_grad():
        torch.manual_seed(7)
        draft.lm_head.weight.add_(torch.randn_like(draft.lm_head.weight) * draft.lm_head.weight.std())
    top = int(target_model(torch.tensor([PROMPT])).logits[0, -1].argmax())
    rng = np.random.default_rng(0)
    ids = np.array(sorted(i for i in range(tiny.VOCAB) if i != top and rng.random() < 0.6))
    runner = shortlist.Shortlisted(BatchRunner(shortlist.slice_head(draft, ids)), ids, tiny.VOCAB)
    return SpeculativeGenerator.from_models(target_model, tok, "draft", runner, tok), top


def samples(gen, reject=None):
    counts = Counter()
    with gen.configured(**({} if reject is None else {"reject": reject})):
        for i in range(BATCH_N):
            out = gen.generate(list(PROMPT), TOPP.replace(seed=5000 + i), k=2, chat=False)
            counts[tuple(out.token_ids)] += 1
    return counts


def test_shortlisted_draft_joint_distribution(target_model, tok):
    gen, top = shortlisted_gen(target_model, tok)
    counts = samples(gen)
    assert sum(c for seq, c in counts.items() if seq[0] == top) > BATCH_N // 10  # never drafted, still sampled
    assert_exact(one_sample(counts, exact_model_joint(target_model, PROMPT, TOPP, 3), alpha=ALPHA))


def test_control_shortlisted_draft_with_naive_residual_is_rejected(target_model, tok):
    gen, _ = shortlisted_gen(target_model, tok)
    result = one_sample(samples(gen, naive_rejection_sample), exact_model_joint(target_model, PROMPT, TOPP, 3),
                        alpha=ALPHA)
    assert result.p_value < ALPHA, result


def test_greedy_with_a_shortlisted_draft_equals_plain(target_model, tok):
    gen, _ = shortlisted_gen(target_model, tok)
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
    plain = gen.generate(list(PROMPT), greedy, k=0, chat=False).token_ids
    assert gen.generate(list(PROMPT), greedy, k=3, chat=False).token_ids == plain


def test_a_target_shortlist_is_refused():
    from specdecode.models.generator import load_models

    with pytest.raises(ModelError, match="the target keeps its full vocabulary"):
        load_models("default+v32k", None)


needs_llamacpp = pytest.mark.skipif(not llamacpp.available(), reason="llama-cpp-python is not installed")


@needs_llamacpp
@pytest.mark.realmodel
def test_the_shortlisted_gguf_scores_the_list_as_the_full_draft_does():
    from specdecode.models.loader import load_draft
    from specdecode.models.registry import resolve
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve("default", "draft").path))
    full = llamacpp.LlamaCppRunner.load(llamacpp.requantized(resolve("default", "draft").gguf, "q4_0"), n_ctx=256,
                                        max_rows=2)
    short, _ = load_draft("llamacpp:default@q4_0+v32k", "auto", full, tokenizer)
    assert isinstance(short, shortlist.Shortlisted) and short.vocab_size == full.vocab_size == 151936
    # A peer that loads files (llama-server's draft) runs the full-vocabulary source it was cut from.
    assert short.source_gguf == full.gguf and short.inner.gguf != full.gguf
    ids = tokenizer("def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)")["input_ids"]
    rare = [i for i in range(151000, 151600) if i not in set(short.ids.tolist())][:3]  # outside the list
    feed = ids + rare + ids[:4]
    for r in (full, short):
        r.add_rows([])
    a, b = full.forward([feed])[0], short.forward([feed])[0]
    keep = short.ids
    # The same layers, the same output rows, the same input embeddings (tokens outside the list
    # included): the logits over the list agree to llama.cpp's rounding; outside, -inf.
    assert (a[:, keep] - b[:, keep]).abs().max() < 0.05
    assert (a[:, keep].argmax(-1) == b[:, keep].argmax(-1)).all()
    outside = torch.ones(151936, dtype=torch.bool)
    outside[keep] = False
    assert torch.isinf(b[:, outside]).all()
    for r in (full, short):
        r.remove_rows([0])
