"""llama.cpp's own server (`make llama-server`, which `make test` runs) as a real third-party peer:
its n-gram cache and draft-model speculation pass `verify --endpoint` against the same server
decoding plainly; `tune --endpoint` reads its counters; the bench drives it as a method."""

import pytest

from clirun import run_cli
from specdecode import SamplingParams
from specdecode.bench import llama_server

pytestmark = [pytest.mark.realmodel,
              pytest.mark.skipif(llama_server.binary() is None,
                                 reason="llama-server is not built: run `make llama-server` (make test does)")]

PROMPT = "1, 2, 3, 1, 2, 3, 1, 2, 3, 1,"  # repetitive: the n-gram cache drafts here
# For the exactness check: repetitive too, but with many outcomes at top-k 3 (the counting prompt
# has one, and a test of one cell passes whatever the server does).
VARIED = "red blue red green red blue red green red"


@pytest.fixture(scope="module")
def gguf():
    from specdecode.models.registry import resolve

    return str(resolve("default", "draft").gguf)  # the 0.5B: quick, and the check does not need the 1.5B


@pytest.mark.parametrize("spec", [("--spec-type", "ngram-cache"), ("--spec-type", "draft-simple", "-md", "SELF")])
def test_llama_server_speculation_is_exact_against_itself_without(gguf, spec, capsys, monkeypatch):
    spec = tuple(gguf if arg == "SELF" else arg for arg in spec)
    with llama_server.LlamaServer(gguf, context=1024) as plain, \
            llama_server.LlamaServer(gguf, *spec, "--spec-draft-n-max", "4", context=1024) as fast:
        report = run_cli(capsys, monkeypatch, "verify", VARIED, "--endpoint", fast.url, "--baseline", plain.url,
                         "--samples", "200", "--length", "3", "--top-k", "3", "--temperature", "1",
                         "--concurrency", "1", "--json")
        assert report["passed"] and report["samples"] == 200, report
        assert report["distinct_outcomes"] >= 3, report
        # It did speculate during the check (llama.cpp drafts up to max_tokens - 2 a request): its counters moved.
        from specdecode.advise.endpoint_tune import parse_metrics
        import httpx

        counters = parse_metrics(httpx.get(f"{fast.url}/metrics").text)
        assert counters.engine == "llamacpp" and counters.drafts > 0 and counters.draft_tokens > 0


def test_tune_endpoint_reads_llama_server_counters(gguf, capsys, monkeypatch):
    with llama_server.LlamaServer(gguf, "--spec-type", "ngram-cache", "--spec-draft-n-max", "6", context=2048) as fast:
        got = run_cli(capsys, monkeypatch, "tune", "--endpoint", fast.url, "--draft-cost", "0", "--workload",
                      "repetitive", "--limit", "3", "--requests", "3", "--max-new-tokens", "48", "--json")
    level = got["levels"][0]
    assert got["engine"] == "llamacpp" and level["acceptance_model"] == "per-position"
    assert 0 <= level["k"] <= len(level["acceptance"]) and "--spec-draft-n-max" in level["flag"]


def test_bench_method_streams_token_ids(gguf):
    from specdecode.models.registry import resolve
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(resolve("default", "draft").path))
    ids = tok(PROMPT)["input_ids"]
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    plain = llama_server.LlamaServerMethod("llama-server", gguf)
    ngram = llama_server.LlamaServerMethod("llama-server-ngram", gguf)
    try:
        a, b = plain.run(ids, params, None), ngram.run(ids, params, 4)
    finally:
        plain.close()
        ngram.close()
    assert len(a.token_ids) == 12 and a.token_ids == b.token_ids  # greedy: speculation changes nothing
    assert b.drafted is not None and b.drafted > 0 and sum(n for _, n in a.steps) == 12


def test_bench_draft_method_drafts_at_most_k_a_pass(gguf):
    """llama-server bounds a draft by its own --spec-draft-n-max, not by a request's
    speculative.n_max: the draft method runs one server per k. Drafting from the model itself (every
    draft accepted), a run at k = 1 drafts one token a pass, at k = 3 three: fewer drafts over 12
    tokens at k = 1. Through one server at 16 for every k (the control) the two runs draft alike."""
    from specdecode.models.registry import resolve
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(resolve("default", "draft").path))
    ids = tok(PROMPT)["input_ids"]
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    draft = llama_server.LlamaServerMethod("llama-server-draft", gguf, draft_gguf=gguf)
    started = []
    try:
        one, three = draft.run(ids, params, 1), draft.run(ids, params, 3)
        assert one.token_ids == three.token_ids
        assert 0 < one.drafted < three.drafted, (one.drafted, three.drafted)
        started = list(draft.servers.values())
        draft.servers[3] = draft.servers[1] = draft.server_for(16)  # the control: one server for every k
        assert draft.run(ids, params, 1).drafted == draft.run(ids, params, 3).drafted
    finally:
        draft.close()
        for server in started:
            server.close()
