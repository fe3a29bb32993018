"""The OpenAI-compatible server on a real uvicorn on loopback, with tiny models."""

import json
import re
import threading
import time

import httpx
import pytest

from live_server import live_server
from specdecode import EngineConfig, SpeculativeGenerator
from specdecode.server import create_app

MODEL = "tiny"


def metric(base: str, name: str, **labels) -> float:
    """The value of one sample in /metrics (0 when absent)."""
    text = httpx.get(f"{base}/metrics").text
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([\w:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def engine_with(gen: SpeculativeGenerator, **config) -> SpeculativeGenerator:
    """A generator of its own over the fixture's models (tests patch it), with these knobs."""
    draft = gen.proposers["draft"].runner.model
    return SpeculativeGenerator.from_models(gen.target.model, gen.tokenizer, "draft", draft, gen.tokenizer,
                                            config=EngineConfig(**config))


def slow(engine: SpeculativeGenerator, seconds: float) -> SpeculativeGenerator:
    """Make every step take a while, so that tests can catch requests in flight."""
    step = engine.step

    def slow_step():
        time.sleep(seconds)
        step()

    engine.step = slow_step
    return engine


@pytest.fixture
def server(twin_gen):
    # Load policy off: with it on, k follows the measured costs, and a seeded *sampled* request
    # consumes its random numbers differently when k differs (same distribution, other tokens).
    engine = engine_with(twin_gen, max_batch=4, max_waiting=8, load_policy=False)
    with live_server(create_app(engine, MODEL, default_k=3)) as (url, _):
        yield url, engine


def sse_events(response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[6:]
            events.append("[DONE]" if data == "[DONE]" else json.loads(data))
    return events


def test_models_health_and_plain_completion(server, tok):
    base, engine = server
    assert httpx.get(f"{base}/health").json()["status"] == "ok"
    assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == MODEL
    body = {"model": MODEL, "prompt": "abcabc", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    r = httpx.post(f"{base}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    prompt_ids = tok("abcabc")["input_ids"]
    assert out["object"] == "text_completion" and out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": 12,
                            "total_tokens": len(prompt_ids) + 12}
    from specdecode.sampling.params import SamplingParams

    alone = engine.generate(prompt_ids, SamplingParams(max_new_tokens=12, ignore_eos=True), k=3, chat=False)
    assert out["choices"][0]["text"] == alone.text
    assert out["speculative"]["accepted_tokens"] == out["speculative"]["drafted_tokens"] > 0  # twin draft


def test_streaming_completion_and_metrics(server):
    base, _ = server
    drafts_before = metric(base, "specdecode:spec_decode_num_draft_tokens_total")
    body = {"prompt": "hello", "max_tokens": 10, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    usage = events[-2]["usage"]
    assert usage["completion_tokens"] == 10
    chunks = [e for e in events[:-2]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["text"] for c in chunks)
    full = httpx.post(f"{base}/v1/completions", json=body | {"stream": False}, timeout=60).json()
    assert text == full["choices"][0]["text"]
    # k=3 with an always-accepted draft: whole blocks arrive in one chunk.
    assert len(chunks) < 10
    assert metric(base, "specdecode:spec_decode_num_draft_tokens_total") > drafts_before
    accepted = metric(base, "specdecode:spec_decode_num_accepted_tokens_total")
    per_pos = sum(metric(base, "specdecode:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
                  for p in range(3))
    assert accepted == per_pos > 0
    assert metric(base, "specdecode:request_success_total", finished_reason="length") == 2
    assert metric(base, "specdecode:generation_tokens_total") == 20
    assert metric(base, "specdecode:time_to_first_token_seconds_count") == 2
    assert metric(base, "specdecode:inter_token_latency_seconds_count") == 18  # every token after the first


def test_chat_streaming_and_not(server):
    base, _ = server
    body = {"model": MODEL, "messages": [{"role": "system", "content": "be brief"},
                                         {"role": "user", "content": [{"type": "text", "text": "hi there"}]}],
            "max_tokens": 8, "temperature": 0.7, "seed": 3, "ignore_eos": True,
            "speculative": {"proposer": "ngram", "k": 2}}
    full = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60).json()
    assert full["object"] == "chat.completion"
    assert full["choices"][0]["message"]["role"] == "assistant"
    assert full["usage"]["completion_tokens"] == 8
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body | {"stream": True}, timeout=60) as r:
        events = sse_events(r)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e["choices"])
    assert text == full["choices"][0]["message"]["content"]  # same seed, same tokens
    assert events[-2]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("body, status, words", [
    ("{not json", 400, "JSON"),
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "n": 0}, 400, "n must be"),
    ({"prompt": "x", "n": 17}, 400, "n must be"),
    ({"prompt": "x", "logprobs": 21}, 400, "logprobs must be"),
    ({"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
    ({"prompt": "x", "repetition_penalty": -1}, 400, "repetition_penalty"),
    ({"prompt": "x", "response_format": {"type": "xml"}}, 400, "response_format.type"),
    ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}, 400,
     "response_format.json_schema.schema"),
    ({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "blob"}}}}, 400,
     "json constraint is invalid"),
    ({"prompt": "x", "guided_regex": "[a-"}, 400, "regex constraint is invalid"),
    ({"prompt": "x", "guided_choice": ["a"], "guided_regex": "a"}, 400, "set only one"),
    ({"prompt": "x", "structured_outputs": {"xml": "a"}}, 400, "structured_outputs.xml"),
    ({"prompt": "x", "logit_bias": {"x": 1}}, 400, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": 101}}, 400, "logit_bias"),
    ({"prompt": "x", "speculative": {"proposer": "medusa"}}, 400, "proposer"),
    ({"prompt": "x", "speculative": {"proposer": "lookahead"}}, 400, "proposer"),
    ({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools is not supported"),
    ({"prompt": "x", "skip_special_tokens": False}, 400, "skip_special_tokens=false is not supported"),
    ({"prompt": "x", "include_stop_str_in_output": True}, 400, "behaves as include_stop_str_in_output=false"),
    ({"prompt": "x", "repeat_penalty": 1.3}, 400, "repeat_penalty=1.3 is not supported"),
    ({"prompt": "x", "typical_p": True}, 400, "typical_p=true is not supported"),
    ({"prompt": "x", "chat_template_kwargs": {"enable_thinking": False}}, 400, "chat_template_kwargs is not supported"),
    ({"prompt": "x", "reasoning_effort": "high"}, 400, "reasoning_effort is not supported"),
    ({"prompt": "x", "grammar": "root ::= \"a\""}, 400, "grammar is not supported"),
    ({"prompt": "x", "speculative": {"tree": 99}}, 400, "tree is the node budget per pass"),
    ({"prompt": "x", "speculative": {"tree": 8, "verifier": "block"}}, 400, "walked with the multi-candidate"),
    ({"prompt": "x", "speculative": {"k": -2}}, 400, "k must be"),
    ({"prompt": "x" * 3000}, 400, "context"),
    ({"prompt": ""}, 400, "empty"),
    ({"prompt": [999999]}, 400, "vocabulary"),
    ({"model": "gpt-4", "prompt": "x"}, 404, "does not exist"),
    ({"max_tokens": 3}, 400, "prompt"),
])
def test_bad_requests_get_clear_4xx_and_the_server_stays_up(server, body, status, words):
    base, _ = server
    if isinstance(body, str):
        r = httpx.post(f"{base}/v1/completions", content=body, headers={"content-type": "application/json"})
    else:
        r = httpx.post(f"{base}/v1/completions", json=body)
    assert r.status_code == status, r.text
    assert words.lower() in r.json()["error"]["message"].lower()
    ok = httpx.post(f"{base}/v1/completions", json={"prompt": "ab", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200


def test_fields_that_change_nothing_are_accepted_and_every_proposer_serves(server):
    base, _ = server
    # vLLM's and llama-server's fields at the value this server behaves as anyway are served.
    as_served = {"skip_special_tokens": True, "include_stop_str_in_output": False, "typical_p": 1, "mirostat": 0,
                 "repeat_penalty": 1.0, "chat_template_kwargs": {}}
    for extra in ({"user": "alice", "metadata": {"a": "b"}}, {"response_format": {"type": "text"}},
                  {"speculative": {"proposer": "hybrid", "k": "auto"}}, as_served):
        r = httpx.post(f"{base}/v1/completions", json={"prompt": "abab", "max_tokens": 4, **extra}, timeout=60)
        assert r.status_code == 200, (extra, r.text)


def test_a_tree_request_through_the_openai_client(server):
    """speculative.tree: greedy output equals plain decoding's, and the tree's stats come back."""
    import openai

    base, _ = server
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
    prompt = "abcabcabdabcab"
    outs = {}
    for tree in (0, 8):
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16, temperature=0.0,
                                      extra_body={"ignore_eos": True,
                                                  "speculative": {"proposer": "ngram", "k": 3, "tree": tree}})
        outs[tree] = r
    assert outs[8].choices[0].text == outs[0].choices[0].text
    stats = outs[8].model_extra["speculative"]
    assert "tree" not in outs[0].model_extra["speculative"]
    # Whether branches are scored depends on the measured costs (the cost rule may keep only the
    # chain): every drafting pass is counted as one or the other.
    t = stats["tree"]
    assert t["passes"] + t["chain_passes"] > 0 and t["nodes"] >= t["passes"]
    assert t["accepted"] == t["first_candidate"] + t["other_candidate"]


def test_disconnect_mid_stream_frees_the_slot(twin_gen):
    engine = slow(engine_with(twin_gen, max_batch=2), 0.05)
    with live_server(create_app(engine, MODEL)) as (base, _):
        body = {"prompt": "abc", "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    break  # one chunk, then hang up
        assert metric(base, "specdecode:num_requests_running") >= 0
        for _ in range(100):
            if metric(base, "specdecode:request_success_total", finished_reason="abort") == 1 \
                    and engine.running == 0:
                break
            time.sleep(0.05)
        assert metric(base, "specdecode:request_success_total", finished_reason="abort") == 1
        assert engine.running == 0 and engine.target.rows == 0
        assert metric(base, "specdecode:num_requests_running") == 0


def test_overload_gets_429_and_the_rest_complete(twin_gen):
    engine = slow(engine_with(twin_gen, max_batch=1, max_waiting=1), 0.02)
    with live_server(create_app(engine, MODEL)) as (base, _):
        results = []

        def fire():
            r = httpx.post(f"{base}/v1/completions", json={"prompt": "abc", "max_tokens": 20, "ignore_eos": True},
                           timeout=120)
            results.append(r)

        threads = [threading.Thread(target=fire) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results)
        assert 429 in codes and 200 in codes, codes
        assert set(codes) <= {200, 429}
        too_many = next(r for r in results if r.status_code == 429)
        assert "retry later" in too_many.json()["error"]["message"]
        assert metric(base, "specdecode:request_rejected_total", reason="queue_full") == codes.count(429)
        assert all(r.json()["usage"]["completion_tokens"] == 20 for r in results if r.status_code == 200)


def test_a_failing_request_does_not_affect_the_others(twin_gen, monkeypatch):
    engine = engine_with(twin_gen, max_batch=4)
    real = engine.target.add_rows

    def add_rows(prefix, count=1):
        if 66 in prefix:
            raise RuntimeError("simulated failure")
        return real(prefix, count)

    monkeypatch.setattr(engine.target, "add_rows", add_rows)
    with live_server(create_app(engine, MODEL)) as (base, _):
        bad = httpx.post(f"{base}/v1/completions", json={"prompt": [66, 66, 66], "max_tokens": 4}, timeout=60)
        assert bad.status_code == 500 and "simulated failure" in bad.json()["error"]["message"]
        good = httpx.post(f"{base}/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4}, timeout=60)
        assert good.status_code == 200
        assert metric(base, "specdecode:request_success_total", finished_reason="error") == 1


def test_graceful_shutdown_finishes_in_flight_requests(twin_gen):
    engine = slow(engine_with(twin_gen, max_batch=2), 0.02)
    results = []
    with live_server(create_app(engine, MODEL), timeout_graceful_shutdown=30) as (base, server):
        def fire():
            results.append(httpx.post(f"{base}/v1/completions", json={"prompt": "abc", "max_tokens": 30,
                                                                      "ignore_eos": True}, timeout=60))

        t = threading.Thread(target=fire)
        t.start()
        while engine.running == 0:
            time.sleep(0.01)
        server.should_exit = True  # as on SIGTERM
        t.join(timeout=60)
    assert results and results[0].status_code == 200
    assert results[0].json()["usage"]["completion_tokens"] == 30
    assert engine.idle()


def test_short_soak_no_failures_no_leftovers():
    """tests/soak.py at a small size (the README reports a 3000-request run)."""
    from soak import soak

    report = soak(requests=300, concurrency=8)
    assert report["failed"] == 0, report["failures"]
    assert report["outcomes"].get("ok", 0) > 200
    assert report["rows_left"] == 0 and report["cache_columns_left"] == 0
    # A client that hangs up after its request already finished is not an abort.
    assert 0 < report["aborted_in_metrics"] <= report["outcomes"].get("hung up", 0)
    assert report["rss_growth_mb"] < 100, report["rss_mb"]
    assert report["suffix_memory_within_bound"] and max(report["suffix_memory_tokens"]) > 0, report


def test_the_official_openai_client(server, tok):
    """What users run: the openai package, chat and completions, streaming and not, our extension
    through extra_body, and a refused field surfacing as the client's BadRequestError."""
    import openai

    base, engine = server
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "abc"}], max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert chat.choices[0].finish_reason == "length" and chat.usage.completion_tokens == 8
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "abc"}], max_tokens=8, temperature=0, stream=True,
        extra_body={"ignore_eos": True}) if c.choices]
    assert "".join(pieces) == chat.choices[0].message.content
    text = client.completions.create(model=MODEL, prompt="abab", max_tokens=6, temperature=0, seed=3,
                                     extra_body={"ignore_eos": True, "speculative": {"proposer": "hybrid", "k": 2}})
    prompt_ids = tok("abab")["input_ids"]
    from specdecode.sampling.params import SamplingParams

    alone = engine.generate(prompt_ids, SamplingParams(max_new_tokens=6, ignore_eos=True), k=0, chat=False,
                            proposer="none")
    assert text.choices[0].text == alone.text
    with pytest.raises(openai.BadRequestError, match="tools is not supported"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "abc"}], max_tokens=4,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])


def test_a_seed_means_the_same_text_alone_and_under_load(twin_gen):
    """The user's complaint: seed=1234 at temperature 1 returned other text beside six other requests.
    Seeded requests use the drafter-invariant sampler, so the load policy's k no longer matters."""
    import concurrent.futures

    import openai

    engine = engine_with(twin_gen, max_batch=8, load_policy=True)
    engine.calibrate()
    with live_server(create_app(engine, MODEL, default_k="auto")) as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)

        def ask(seed, proposer="draft", sampler=None, k=None):
            body = {"ignore_eos": True, "speculative": {"proposer": proposer, **({"k": k} if k is not None else {})},
                    **({"sampler": sampler} if sampler else {})}
            return client.completions.create(model=MODEL, prompt="abcab", max_tokens=24, temperature=1.0, top_p=0.9,
                                             seed=seed, extra_body=body).choices[0].text

        alone = ask(1234)
        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            others = [pool.submit(ask, s, p) for s, p in zip(range(6), ["ngram", "draft", "none", "hybrid"] * 2)]
            busy = pool.submit(ask, 1234)
            [f.result() for f in others]
        assert busy.result() == alone
        assert ask(1234, "none") == alone  # plain decoding with that seed: the same tokens
        # Control: under the standard rule the proposer consumes the seed's random numbers its own way
        # (at a fixed k, so that it drafts whatever the measured costs say).
        assert ask(1234, "none", "standard") != ask(1234, "draft", "standard", k=4)


@pytest.mark.parametrize("scope", ["shared", "client", "off"])
def test_the_suffix_memory_follows_its_scope_and_shows_in_metrics(twin_gen, scope):
    """The same prompt twice: the second reply drafts from the first one's memory when both came
    from one client (or the memory is shared), never across clients under `client`, never under `off`."""
    engine = engine_with(twin_gen, max_batch=4, load_policy=False)
    if scope == "off":
        engine.proposers["suffix"].memory_tokens = 0
    body = {"prompt": "Extract the city: Lisbon.", "max_tokens": 24, "temperature": 0, "ignore_eos": True,
            "speculative": {"proposer": "suffix", "k": 8}}
    with live_server(create_app(engine, MODEL, suffix_scope=scope)) as (base, _):
        def hits(headers=None, **extra):
            before = metric(base, "specdecode:suffix_memory_hits_total")
            r = httpx.post(f"{base}/v1/completions", json=body | extra, headers=headers or {}, timeout=60)
            assert r.status_code == 200, r.text
            return metric(base, "specdecode:suffix_memory_hits_total") - before

        alice, bob = {"Authorization": "Bearer key-alice"}, {"Authorization": "Bearer key-bob"}
        assert hits(alice) == 0  # nothing remembered yet
        assert metric(base, "specdecode:suffix_lookups_total") > 0
        if scope == "shared":
            assert hits(bob) > 0 and metric(base, "specdecode:suffix_memory_tokens") > 0
        elif scope == "client":
            assert hits(bob) == 0  # another client's answer is not drafted from
            assert hits(alice) > 0  # the same client's is
            assert hits(user="carol") == 0 and hits(user="carol") > 0  # the `user` field names a client
            assert hits() == 0 and hits() == 0  # anonymous requests use no memory
        else:
            assert hits(alice) == 0 and metric(base, "specdecode:suffix_memory_tokens") == 0
    assert engine.running == 0
