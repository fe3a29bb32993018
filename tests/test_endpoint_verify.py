"""`specdecode verify --endpoint`: real servers on loopback, sampled over HTTP. Our speculative
server passes against our plain one (a separate server, and the same server with k=0 per request),
llama.cpp's own server with its prompt-lookup draft passes against itself without one, and a server
with the naive residual fails: the negative control that shows the check can fail. Then the errors a
user can make, each one line."""

import copy
import json
import subprocess
import sys
import tempfile
import time

import httpx
import pytest
import torch

import tiny
from clirun import run_cli
from live_server import free_port, live_server
from specdecode import SpeculativeGenerator, cli
from specdecode.bench.endpoint import scrape_counters
from specdecode.checks import endpoint as check
from specdecode.checks.naive import naive_rejection_sample
from specdecode.engine.engine import EngineConfig
from specdecode.models.backends import llamacpp
from specdecode.server import create_app

# top-k 3 over 2 tokens: at most 9 outcomes, so 600 samples a side detect a total-variation
# difference of ~0.4 (the report says the exact figure) and the chi-square test much less.
ARGS = ("--samples", "600", "--length", "2", "--top-k", "3", "--temperature", "1", "--json")


@pytest.fixture(scope="module")
def pair(tok):
    """A target and a draft that is far sharper than it (its head scaled): where the draft is sure and
    the target is not, the naive residual's bias is large (TV ~0.2 on the first token)."""
    target = tiny.model(seed=0)
    draft = copy.deepcopy(target)
    draft.lm_head.weight = torch.nn.Parameter(target.lm_head.weight.detach() * 6)
    return target, draft


def server(pair, tok, naive=False, proposer="draft"):
    config = EngineConfig(max_batch=8, load_policy=False, **({"reject": naive_rejection_sample} if naive else {}))
    gen = SpeculativeGenerator.from_models(pair[0], tok, proposer, pair[1], tok, config=config)
    return live_server(create_app(gen, "tiny", default_k=3))


def verify(capsys, monkeypatch, *args, code=0) -> dict:
    return run_cli(capsys, monkeypatch, "verify", "hello", *args, code=code)


def test_our_speculative_server_passes_and_the_naive_one_fails(pair, tok, capsys, monkeypatch, tmp_path):
    with server(pair, tok) as (url, _):
        report = verify(capsys, monkeypatch, "--endpoint", url, *ARGS, "--plot", str(tmp_path / "d.png"))
        assert report["passed"] and report["baseline_extra"] == {"speculative": {"k": 0}}
        assert report["samples"] == 600 and 2 <= report["cells"] <= 9 and report["detects_tv"] < 0.5
        assert (tmp_path / "d.png").stat().st_size > 0
        # The server did speculate: drafts were accepted and rejected during the run.
        counters = scrape_counters(url)
        assert counters["spec_decode_num_draft_tokens"] > counters["spec_decode_num_accepted_tokens"] > 0
        with server(pair, tok, proposer="none") as (plain_url, _):
            separate = verify(capsys, monkeypatch, "--endpoint", url, "--baseline", plain_url, *ARGS)
            assert separate["passed"] and separate["baseline_extra"] == {}
    with server(pair, tok, naive=True) as (url, _):
        wrong = verify(capsys, monkeypatch, "--endpoint", url, *ARGS, code=1)
        assert not wrong["passed"] and wrong["p_value"] < 1e-3
        # Samples as text (no logprobs asked): the naive residual is caught all the same.
        wrong = verify(capsys, monkeypatch, "--endpoint", url, *ARGS, "--outcome", "text", code=1)
        assert not wrong["passed"] and "logprobs" not in wrong["request"]


def test_first_token_against_the_baselines_exact_distribution(pair, tok, capsys, monkeypatch):
    """Identity transform (T = 1, nothing else) and a baseline whose top logprobs cover the first token."""
    exact, why = check.first_token_exact(check.Side("http://127.0.0.1:1", "m"), {"temperature": 0.7})
    assert exact is None and "not the identity" in why
    with server(pair, tok) as (url, _):
        report = verify(capsys, monkeypatch, "--endpoint", url, "--samples", "300", "--length", "1",
                        "--temperature", "1", "--json")
        assert report["passed"]
        assert "first_token_exact" in report or "cover" in report["first_token_exact_source"]


def test_clear_errors(pair, tok, capsys, monkeypatch):
    port = free_port()
    err = verify(capsys, monkeypatch, "--endpoint", f"http://127.0.0.1:{port}", *ARGS, code=2)["stderr"]
    assert err.startswith("error: cannot reach") and "Traceback" not in err
    assert "needs an http" not in verify(capsys, monkeypatch, "--endpoint", "localhost:8000", *ARGS,
                                         code=2)["stderr"]
    with server(pair, tok) as (url, _):
        err = verify(capsys, monkeypatch, "--endpoint", url, "--model", "other", *ARGS, code=2)["stderr"]
        assert "does not serve 'other'" in err
        err = verify(capsys, monkeypatch, "--endpoint", url, *ARGS, "--detect-tv", "0.05", code=2)["stderr"]
        assert "use --samples" in err
        err = verify(capsys, monkeypatch, "--endpoint", url, *ARGS, "--outcome", "ids", code=2)["stderr"]
        assert "--outcome takes tokens or text, got 'ids'" in err
        with live_server(create_app(SpeculativeGenerator.from_models(pair[0], tok, "none"), "another")) as (b, _):
            err = verify(capsys, monkeypatch, "--endpoint", url, "--baseline", b, *ARGS, code=2)["stderr"]
            assert "serve different models" in err


# -- a third-party peer: llama.cpp's own OpenAI-compatible server (llama-cpp-python's) ---------------

needs_llamacpp = pytest.mark.skipif(not llamacpp.available(), reason="llama-cpp-python is not installed")


def llama_server(gguf: str, *extra: str):
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would fill and block the server
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", "peer",
                             "--port", str(port), "--n_ctx", "512", "--verbose", "False", *extra],
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(log.read()[-2000:])
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("llama_cpp.server did not start")


@needs_llamacpp
@pytest.mark.realmodel
def test_llama_cpp_server_with_prompt_lookup_passes_against_itself_without(capsys, monkeypatch):
    from specdecode.models.registry import resolve

    gguf = str(resolve("default", "draft").gguf)
    plain, plain_url = llama_server(gguf)
    spec, spec_url = llama_server(gguf, "--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "4")
    try:
        # Text outcomes: this server computes logprobs in Python, 5x the time of a 2-token request. A
        # prompt that repeats itself (the lookup drafts) and whose continuation varies (a counting
        # prompt has one outcome at top-k 3, and a test of one cell passes whatever the server does).
        monkeypatch.setattr(sys, "argv", ["specdecode", "verify", "apple pear apple plum apple", "--endpoint",
                                          spec_url, "--baseline", plain_url, "--samples", "120", "--length", "2",
                                          "--top-k", "3", "--temperature", "1", "--concurrency", "2", "--json",
                                          "--outcome", "text"])
        try:
            cli.main()
        except SystemExit as exc:
            assert (exc.code or 0) == 0, capsys.readouterr().err
        report = json.loads(capsys.readouterr().out)
        assert report["passed"] and report["model"] == "peer" and report["samples"] == 120
        assert "logprobs" not in report["request"] and report["distinct_outcomes"] >= 3
    finally:
        for proc in (plain, spec):
            proc.terminate()
            proc.wait(timeout=30)


def main_ok() -> None:
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, exc


def test_paired_bench_of_two_servers(pair, tok, capsys, monkeypatch, tmp_path):
    """`bench --endpoint A --endpoint B`: ABBA rounds per level, every ratio with an interval that holds it."""
    with server(pair, tok) as (spec_url, _), server(pair, tok, proposer="none") as (plain_url, _):
        monkeypatch.setattr(sys, "argv", ["specdecode", "bench", "--endpoint", spec_url, "--endpoint", plain_url,
                                          "--workload", "code", "--limit", "4", "--max-new-tokens", "16",
                                          "--concurrency", "1,2", "--ignore-eos", "--api", "completions",
                                          "--out", str(tmp_path)])
        main_ok()
    report = json.loads((tmp_path / "paired.json").read_text())
    assert [lv["concurrency"] for lv in report["levels"]] == [1, 2]
    for lv in report["levels"]:
        assert lv["order"] == "ABBA" and lv["prompts"] == 4 and lv["errors"] == {"A": 0, "B": 0}
        for r in lv["ratios"].values():
            assert 0 < r["ci_low"] <= r["ratio"] <= r["ci_high"]
    assert "above 1: A" in capsys.readouterr().out
    # Two identical servers (a control): the ratio's interval holds 1 unless the machine drifts far.
    with server(pair, tok, proposer="none") as (a, _), server(pair, tok, proposer="none") as (b, _):
        monkeypatch.setattr(sys, "argv", ["specdecode", "bench", "--endpoint", a, "--endpoint", b, "--workload", "code",
                                          "--limit", "6", "--max-new-tokens", "16", "--ignore-eos", "--api",
                                          "completions", "--out", str(tmp_path / "same")])
        main_ok()
    same = json.loads((tmp_path / "same" / "paired.json").read_text())["levels"][0]["ratios"]["tokens_per_s"]
    assert 0.5 < same["ratio"] < 2.0


def test_bench_refuses_three_endpoints(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["specdecode", "bench", "--endpoint", "http://a", "--endpoint", "http://b",
                                      "--endpoint", "http://c"])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2 and "one server (a load test) or two (paired)" in capsys.readouterr().err


def test_both_logprobs_shapes_give_token_outcomes():
    legacy = {"text": " 2,", "logprobs": {"tokens": [" ", "2", ","], "top_logprobs": [{" ": -0.1, "x": -2.4}, {}, {}]}}
    chat_like = {"text": " 2,", "logprobs": {"content": [
        {"id": 220, "token": " ", "logprob": -0.1, "top_logprobs": [{"id": 220, "token": " ", "logprob": -0.1}]},
        {"id": 17, "token": "2", "logprob": -0.2, "top_logprobs": []}]}}
    assert check.outcome(legacy, 2) == (" ", "2")
    assert check.outcome(chat_like, 2) == (220, 17)  # ids where the server gives them
    assert check.outcome({"text": "abc", "logprobs": None}, 2) == ("abc",)
    assert check.logprob_entries(legacy["logprobs"])[0] == (" ", {" ": -0.1, "x": -2.4})
