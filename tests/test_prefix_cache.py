"""The prefix cache: prompts that start alike prefill only what differs, with the same logits."""

import torch

import tiny
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.models.backends.prefix_cache import MIN_MATCH, PrefixCache

SYSTEM = list(range(10, 70))  # a 60-token "system prompt"


def next_logits(runner, prompt):
    runner.add_rows(prompt[:-1])
    out = runner.forward([[prompt[-1]]])[0][-1]
    runner.remove_rows([0])
    return out


def test_a_shared_prefix_is_reused_and_the_logits_match(target_model):
    plain = BatchRunner(target_model)
    cached = BatchRunner(target_model, prefix_cache=1000)
    calls = []
    real = target_model.forward

    def counting(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[1])
        return real(*args, **kwargs)

    for tail in ([80, 81, 82], [90, 91], [100, 101, 102, 103]):
        prompt = SYSTEM + tail
        target_model.forward = counting
        try:
            got = next_logits(cached, prompt)
        finally:
            del target_model.forward
        assert torch.allclose(got, next_logits(plain, prompt), atol=1e-5)
    # The first prompt is prefilled whole, the others only past the shared 60 tokens.
    assert calls[0::2] == [62, 1, 3] and calls[1::2] == [1, 1, 1]
    assert cached.prefix_cache.hits == 2 and cached.prefix_cache.reused_tokens == 120


def test_rows_joining_a_batch_with_a_cached_prefix_decode_like_without(target_model, tok):
    prompts = [SYSTEM + [80 + i, 81] for i in range(3)]
    outs = {}
    for size in (0, 1000):
        gen = SpeculativeGenerator.from_models(target_model, tok, "draft", tiny.model(hidden=32, layers=1, seed=1), tok,
                                               prefix_cache=size)
        outs[size] = [gen.generate(p, SamplingParams(max_new_tokens=8, ignore_eos=True), k=3, chat=False).token_ids
                      for p in prompts]
        if size:
            assert gen.target.prefix_cache.hits == 2
            assert gen.proposers["draft"].runner.prefix_cache.hits == 2  # the draft's prefill too
    assert outs[0] == outs[1000]


def test_the_cache_is_bounded_least_recently_used_first():
    cache = PrefixCache(max_tokens=100)
    kv = [(torch.zeros(1, 2, 80, 4), torch.zeros(1, 2, 80, 4))]
    cache.store(list(range(40)), kv)
    cache.store(list(range(50)), kv)  # covers the first: it is dropped
    assert cache.tokens == 50 and len(cache.entries) == 1
    cache.store([7] * 30, kv)
    assert cache.match(list(range(45)))[0] == 45  # touched: now the most recent
    cache.store([9] * 30, kv)  # 110 tokens: the least recently used ([7] * 30) leaves
    assert cache.tokens == 80 and cache.match([7] * 30)[0] == 0
    assert cache.match(list(range(MIN_MATCH - 1)))[0] == 0  # too short to be worth it
    cache.store(list(range(200, 400)), kv)  # longer than the whole budget: not kept
    assert cache.tokens == 80
    assert all(k.shape[2] <= 50 for e in cache.entries.values() for k, _ in e.layers)


def test_the_server_reuses_a_shared_system_prompt_and_says_so_in_metrics(target_model, tok):
    import httpx

    from live_server import live_server
    from specdecode.server import create_app
    from test_server import metric

    system = "You are a careful assistant. Answer briefly and cite the rule you follow. " * 2
    answers = {}
    for size in (0, 1000):
        gen = SpeculativeGenerator.from_models(target_model, tok, "ngram", prefix_cache=size)
        with live_server(create_app(gen, "tiny", default_k=3)) as (url, _):
            answers[size] = [httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                "max_tokens": 6, "temperature": 0}).json()["choices"][0]["message"]["content"] for q in ("a?", "b?")]
            if size:
                queried = metric(url, "specdecode:prefix_cache_queries_total")
                hits = metric(url, "specdecode:prefix_cache_hits_total")
                assert queried > hits >= len(tok(system)["input_ids"])  # the second prompt found the first
                assert metric(url, "specdecode:prefix_cache_tokens") > 0
    assert answers[0] == answers[1000]
