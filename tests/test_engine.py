"""The engine on tiny random float32 models: speculative greedy output equals plain greedy output."""

from types import SimpleNamespace

import torch

import pytest

import tiny
from specdecode import InvalidParameter, RequestError, SamplingParams, SpeculativeGenerator

PROMPTS = [
    "def fibonacci(n):",
    "The quick brown fox jumps over the lazy dog. The quick brown",
    [5, 17, 99, 3, 5, 17, 99],
    [200],
]


def greedy(n, **kw):
    return SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True, **kw)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("prompt", PROMPTS, ids=["code", "prose", "ids", "one-token"])
def test_greedy_speculative_equals_plain(twin_gen, small_draft_gen, prompt, k):
    plain = twin_gen.generate(prompt, greedy(40), k=k, chat=False, proposer="none")
    assert plain.stats["target_passes"] == 40  # one pass per token
    for gen, name in ((twin_gen, "draft"), (small_draft_gen, "draft"), (twin_gen, "ngram")):
        spec = gen.generate(prompt, greedy(40), k=k, chat=False, proposer=name)
        assert spec.token_ids == plain.token_ids, f"{name} k={k}"
        assert spec.text == plain.text


@pytest.mark.parametrize("proposer", ["draft", "hybrid"])
def test_draft_context_window_prefills_the_end_of_the_prompt_only(target_model, tok, proposer):
    prompt = "The quick brown fox jumps over the lazy dog. The quick brown"
    twin = tiny.model(hidden=64, layers=2, seed=0)
    gen = SpeculativeGenerator.from_models(target_model, tok, proposer, twin, tok, draft_context=8)
    drafter = gen.proposers["draft"]
    ids = gen.encode(prompt, chat=False)
    row = SimpleNamespace(id=-1, prompt_ids=ids, context=ids)
    drafter.join([row])
    assert drafter.runner.rows == 0  # nothing is prefilled before the row first drafts
    drafter._start([row])
    assert drafter.runner.length(0) == 7  # the last 8 prompt tokens, all but the one fed with the first pass
    assert drafter.state[-1].offset == len(ids) - 8
    drafter.leave([row])
    assert drafter.runner.rows == 0 and not drafter.state
    plain = gen.generate(prompt, greedy(40), chat=False, proposer="none")
    for k in (1, 4, "auto"):
        spec = gen.generate(prompt, greedy(40), k=k, chat=False, proposer=proposer)
        assert spec.token_ids == plain.token_ids, k


def test_draft_context_window_must_be_a_token_count(target_model, tok):
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="context window"):
            SpeculativeGenerator.from_models(target_model, tok, "draft", tiny.model(hidden=32, layers=1), tok,
                                             draft_context=bad)


def test_twin_draft_accepts_all_and_passes_shrink(twin_gen):
    out = twin_gen.generate("hello", greedy(31), k=4, chat=False, proposer="draft")
    s = out.stats
    assert s["acceptance_rate"] == 1.0
    # 6 passes of 4 accepted + 1 bonus, then one plain pass for the last token.
    assert s["target_passes"] == 7 and s["new_tokens"] == 31
    assert s["mean_accepted_tokens"] == pytest.approx(31 / 7)
    assert s["per_position_acceptance"] == [1.0, 1.0, 1.0, 1.0]
    assert s["drafted_tokens"] == 24 and s["accepted_tokens"] == 24
    # Three tokens after 30: the last pass drafts only the 2 still needed.
    s = twin_gen.generate("hello", greedy(33), k=4, chat=False, proposer="draft").stats
    assert s["target_passes"] == 7 and s["drafted_tokens"] == 26


def test_max_new_tokens_ends_inside_an_accepted_block(twin_gen):
    plain = twin_gen.generate("abc", greedy(30), k=8, chat=False, proposer="none")
    for n in (1, 2, 5, 7, 11):
        spec = twin_gen.generate("abc", greedy(n), k=8, chat=False, proposer="draft")
        assert spec.token_ids == plain.token_ids[:n]
        assert spec.finish_reason == "length"


def test_eos_inside_an_accepted_block(twin_gen, tok):
    plain = twin_gen.generate("xyz", greedy(30), k=8, chat=False, proposer="none")
    # Pick a token that first occurs at position 6 as EOS: with k=8 and a perfect draft it sits
    # in the middle of the first accepted block.
    j = next(i for i, t in enumerate(plain.token_ids) if i >= 3 and t not in plain.token_ids[:i])
    eos = plain.token_ids[j]
    gen = SpeculativeGenerator(twin_gen.target, tok, twin_gen.proposers, "draft", eos_token_ids=[eos])
    spec = gen.generate("xyz", SamplingParams(max_new_tokens=30), k=8, chat=False)
    assert spec.token_ids == plain.token_ids[: j + 1]
    assert spec.finish_reason == "stop"
    # ignore_eos keeps going; a stop id does the same job as EOS.
    assert gen.generate("xyz", greedy(30), k=8, chat=False).token_ids == plain.token_ids
    stop = twin_gen.generate("xyz", greedy(30, stop_token_ids=[eos]), k=8, chat=False, proposer="draft")
    assert stop.token_ids == plain.token_ids[: j + 1]


def test_stop_string_cuts_text_and_stream_never_shows_it(twin_gen):
    plain = twin_gen.generate("stop here", greedy(40), k=4, chat=False, proposer="none")
    text = plain.text
    needle = text[10:13]
    assert needle and text.find(needle) >= 0
    pieces = []
    out = twin_gen.generate("stop here", greedy(40, stop=[needle]), k=4, chat=False, proposer="draft",
                            on_token=lambda t, d: pieces.append(d))
    assert out.text == text[: text.find(needle)]
    assert out.finish_reason == "stop"
    assert "".join(pieces) == out.text


def test_streaming_reports_every_token(twin_gen):
    seen = []
    out = twin_gen.generate("stream", greedy(20), k=4, chat=False, proposer="draft",
                            on_token=lambda t, d: seen.append((t, d)))
    assert [t for t, _ in seen if t is not None] == out.token_ids
    assert "".join(d for _, d in seen) == out.text


def test_chat_template_is_applied(twin_gen, tok):
    out = twin_gen.generate("hi", greedy(3), k=2)
    assert out.prompt_token_ids == tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                                           add_generation_prompt=True, tokenize=True)["input_ids"]


def test_seeded_sampling_is_reproducible(small_draft_gen):
    params = SamplingParams(max_new_tokens=25, temperature=1.0, seed=123, ignore_eos=True)
    a = small_draft_gen.generate("seed", params, k=3, chat=False)
    b = small_draft_gen.generate("seed", params, k=3, chat=False)
    c = small_draft_gen.generate("seed", params.replace(seed=124), k=3, chat=False)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_bad_requests_are_clear_errors(twin_gen):
    with pytest.raises(RequestError, match="prompt is empty"):
        twin_gen.generate("   ", greedy(4))
    with pytest.raises(RequestError, match="prompt is empty"):
        twin_gen.generate([], greedy(4))
    with pytest.raises(RequestError, match="context is 512"):
        twin_gen.generate([1] * 600, greedy(4), chat=False)
    with pytest.raises(RequestError, match="outside the vocabulary"):
        twin_gen.generate([1, 100000], greedy(4), chat=False)
    with pytest.raises(InvalidParameter, match="k must be an integer >= 0"):
        twin_gen.generate("x", greedy(4), k=-1)
    with pytest.raises(RequestError, match="proposer 'medusa' is not available"):
        twin_gen.generate("x", greedy(4), proposer="medusa")


def test_generation_stops_at_the_context_limit(tok):
    small = tiny.model(max_positions=48)
    gen = SpeculativeGenerator.from_models(small, tok, "draft", tiny.model(max_positions=48), tok)
    out = gen.generate([7] * 40, greedy(100), k=8, chat=False)
    assert len(out.token_ids) == 8 and out.finish_reason == "length"
    with pytest.raises(RequestError, match="context is 48"):
        gen.generate([7] * 48, greedy(4), chat=False)
    assert len(gen.generate([7] * 47, greedy(4), chat=False).token_ids) == 1


class ThreadsSeen:
    """A runner that reports torch's intra-op threads at each forward pass (and may claim its own)."""

    def __init__(self, runner, own_threads: bool):
        self._runner, self.own_threads, self.seen = runner, own_threads, []

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def forward(self, *args, **kwargs):
        self.seen.append(torch.get_num_threads())
        return self._runner.forward(*args, **kwargs)


@pytest.mark.parametrize("own_threads", [True, False])
def test_a_step_samples_on_one_torch_thread_only_when_no_torch_model_runs(target_model, tok, own_threads):
    from specdecode.models.loader import as_runner

    runner = ThreadsSeen(as_runner(target_model), own_threads)
    gen = SpeculativeGenerator.from_models(runner, tok, "ngram")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = gen.generate("The quick brown fox", SamplingParams(max_new_tokens=6, temperature=1.0, seed=3),
                           chat=False, proposer="none")
        assert len(out.token_ids) == 6
        # Runtimes with their own threads leave torch only the sampling: one thread in the step,
        # and the caller's setting back after it; a torch model keeps the caller's threads.
        assert set(runner.seen) == ({1} if own_threads else {2})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("own_threads", [True, False])
def test_a_shortlisted_draft_and_the_measurements_that_price_it_keep_the_engines_thread_rule(
        target_model, tok, own_threads):
    """A shortlist wraps a draft runtime: whose threads compute is the runtime's to say. Unsaid, a
    step over a shortlisted llama.cpp draft kept torch's threads awake beside llama.cpp's. The
    draft choice times its candidates under the same rule (timing.as_engine_runs)."""
    import numpy as np

    from specdecode.models.loader import as_runner
    from specdecode.models.shortlist import Shortlisted
    from specdecode.models.timing import as_engine_runs

    target = ThreadsSeen(as_runner(target_model), True)
    inner = ThreadsSeen(as_runner(target_model), own_threads)
    draft = Shortlisted(inner, np.arange(target.vocab_size), target.vocab_size)
    gen = SpeculativeGenerator.from_models(target, tok, "draft", draft, tok)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen.generate("The quick brown fox", SamplingParams(max_new_tokens=6, temperature=1.0, seed=3), k=2,
                     chat=False, proposer="draft")
        assert inner.seen and set(inner.seen) == ({1} if own_threads else {2})
        seen = []
        as_engine_runs([target, draft], lambda: seen.append(torch.get_num_threads()))()
        assert seen == ([1] if own_threads else [2]) and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
