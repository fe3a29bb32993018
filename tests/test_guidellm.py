"""guidellm, the load generator vLLM's users run against OpenAI-compatible servers, against ours:
chat and completions, streamed, two requests at a time; every request must succeed with the asked
number of tokens, counted by guidellm from the stream's usage."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from live_server import live_server
from specdecode import EngineConfig, SpeculativeGenerator
from specdecode.server import create_app

GUIDELLM = Path(sys.executable).with_name("guidellm")
REQUESTS = 6


@pytest.fixture(scope="module")
def server(small_draft_gen):
    draft = small_draft_gen.proposers["draft"].runner.model
    engine = SpeculativeGenerator.from_models(small_draft_gen.target.model, small_draft_gen.tokenizer, "draft", draft,
                                              small_draft_gen.tokenizer, config=EngineConfig(max_batch=4))
    with live_server(create_app(engine, "tiny", default_k="auto")) as (url, _):
        yield url, engine


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
def test_guidellm_runs_against_the_server(server, tok, tmp_path, route):
    url, engine = server
    tok.save_pretrained(tmp_path / "tokenizer")
    report = tmp_path / "guidellm.json"
    cmd = [str(GUIDELLM), "run", "--backend", f"kind=openai_http,target={url},model=tiny,request_format={route}",
           "--profile", "kind=concurrent,streams=2", "--constraint", f"kind=max_requests,count={REQUESTS}",
           "--data", "kind=synthetic_text,prompt_tokens=24,output_tokens=8",
           "--tokenizer", f"kind=huggingface_auto,model={tmp_path / 'tokenizer'}",
           "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    bench = json.loads(report.read_text())["benchmarks"][0]
    state = bench["scheduler_state"]
    assert state["successful_requests"] == REQUESTS and state["errored_requests"] == 0, done.stderr[-3000:]
    assert [r["output_tokens"] for r in bench["requests"]["successful"]] == [8] * REQUESTS
    assert engine.counters["finished"] >= REQUESTS and engine.running == 0
