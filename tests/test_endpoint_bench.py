"""`bench --endpoint` against a stub OpenAI-compatible server on loopback (real uvicorn).

The stub streams 3 chunks per request: 1 token, then a chunk of 4 tokens (as a speculative server
sends an accepted block), then 1 token, 50 ms apart, and reports usage; its /metrics counters
move by 10 drafted and 6 accepted tokens per request.
"""

import asyncio
import json
import socket
import sys

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, StreamingResponse

from live_server import live_server
from specdecode import cli

CHUNKS = ["a", "bcde", "f"]  # with a one-character-per-token tokenizer: 1, 4 and 1 tokens
STATE = {"requests": 0, "fail_every": 0}


def stub_app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "stub-model", "object": "model"}]}

    @app.get("/metrics", response_class=PlainTextResponse)
    def prom():
        n = STATE["requests"]
        return (f"# TYPE stub_spec_decode_num_drafts counter\nstub_spec_decode_num_drafts_total {2 * n}\n"
                f"stub_spec_decode_num_draft_tokens_total {10 * n}\n"
                f"stub_spec_decode_num_accepted_tokens_total {6 * n}\n")

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        STATE["requests"] += 1
        STATE["last_body"] = body
        fail = STATE["fail_every"] and STATE["requests"] % STATE["fail_every"] == 0

        async def events():
            for i, text in enumerate(CHUNKS):
                await asyncio.sleep(0.05)
                if fail and i == 1:  # as a server whose batched pass failed mid-stream reports it
                    yield "data: " + json.dumps({"error": {"message": "generation failed: boom"}}) + "\n\n"
                    yield "data: [DONE]\n\n"
                    return
                finish = "length" if i == len(CHUNKS) - 1 else None
                yield "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text},
                                                          "finish_reason": finish}]}) + "\n\n"
            yield "data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def bench(monkeypatch, capsys, out, *args) -> list[dict]:
    """Run `specdecode bench ARGS --out OUT` in-process; the records of results.json."""
    monkeypatch.setattr(sys, "argv", ["specdecode", "bench", *args, "--out", str(out)])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return json.loads((out / "results.json").read_text())


@pytest.fixture
def stub_server():
    STATE.update(requests=0, fail_every=0)
    with live_server(stub_app()) as (url, _server):
        yield url


def test_endpoint_bench_counts_tokens_per_chunk(monkeypatch, capsys, stub_server, tiny_dirs, tmp_path):
    out = tmp_path / "out"
    records = bench(monkeypatch, capsys, out, "--endpoint", stub_server, "--concurrency", "1,4", "--requests", "8",
                    "--limit", "4", "--categories", "qa", "--tokenizer", tiny_dirs["target"])
    assert [r["concurrency"] for r in records] == [1, 4]
    for r in records:
        assert r["errors"] == 0 and r["requests"] == 8
        assert r["output_tokens_mean"] == 6
        # ITLs: 4 tokens of the block share its ~50 ms gap (~12.5 ms each), the last token ~50 ms.
        assert 0.008 < r["itl_p50_s"] < 0.03
        assert r["itl_p99_s"] > 0.04
        assert r["ttft_s"] >= 0.045
        assert r["acceptance_rate"] == pytest.approx(0.6)
        assert r["mean_accepted_tokens"] == pytest.approx(1 + 6 / 2)
    # 4 concurrent requests finish in about the time of 1: throughput grows with concurrency.
    assert records[1]["tokens_per_s"] > 2 * records[0]["tokens_per_s"]
    assert (out / "report.md").is_file() and (out / "throughput_itl_vs_concurrency.png").is_file()


def test_endpoint_errors_are_counted_not_fatal(monkeypatch, capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    (record,) = bench(monkeypatch, capsys, tmp_path, "--endpoint", f"http://127.0.0.1:{port}", "--model", "m",
                      "--requests", "2", "--limit", "1")
    assert record["errors"] == 2 and "ConnectError" in record["error_examples"][0]


def test_errors_inside_a_stream_are_failed_requests(monkeypatch, capsys, stub_server, tiny_dirs, tmp_path):
    """HTTP 200 then an error event: the request failed, though the status said it started well."""
    STATE["fail_every"] = 2
    (record,) = bench(monkeypatch, capsys, tmp_path, "--endpoint", stub_server, "--concurrency", "1", "--requests",
                      "6", "--limit", "2", "--categories", "qa", "--tokenizer", tiny_dirs["target"], "--ignore-eos")
    assert record["errors"] == 3 and "boom" in record["error_examples"][0]
    assert record["output_tokens_mean"] == 6  # averaged over the completed requests only
    assert STATE["last_body"]["ignore_eos"] is True  # --ignore-eos: equal work for every server
