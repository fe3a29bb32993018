"""Property-based API test: schemathesis generates requests from the server's own /openapi.json
(the examples, coverage and fuzzing phases, deterministic) against a live server on tiny models.
Every answer must be a documented status with a documented body, no 5xx, within a time bound; a body
the schema allows must be served and one it forbids refused (the schema is the contract); the
server is healthy afterwards."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import tiny
from live_server import live_server
from specdecode import EngineConfig, SpeculativeGenerator
from specdecode.server import create_app

SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
CONTEXT = 384
MAX_RESPONSE_S = 15  # a request on these models takes well under a second; 15 s means a hang
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
          "response_headers_conformance,positive_data_acceptance,negative_data_rejection,unsupported_method")


@pytest.fixture(scope="module")
def fuzz_server(tok):
    # The context bounds every generation, however large the max_tokens the fuzzer picks, and is long
    # enough for the prompts it writes (a prompt past the context is refused: a bound in tokens that
    # no schema of strings can state).
    target = tiny.model(max_positions=CONTEXT)
    draft = tiny.model(hidden=32, layers=1, seed=1, max_positions=CONTEXT)
    gen = SpeculativeGenerator.from_models(target, tok, "draft", draft, tok,
                                           config=EngineConfig(max_batch=16, max_waiting=64))
    with live_server(create_app(gen, "tiny", default_k=3, default_max_tokens=8)) as (url, _):
        yield url


def schemathesis(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SCHEMATHESIS, "run", f"{url}/openapi.json", "--generation-deterministic", "--seed", "1",
                           "--max-response-time", str(MAX_RESPONSE_S), "--request-timeout", "60",
                           "--continue-on-failure", "--output-sanitize", "false", "--no-color", *args],
                          capture_output=True, text=True, timeout=600)


def test_the_server_keeps_its_own_schema(fuzz_server):
    assert SCHEMATHESIS, "schemathesis is in the dev extra: pip install -e '.[dev]'"
    started = time.monotonic()
    run = schemathesis(fuzz_server, "--phases", "examples,coverage,fuzzing", "--max-examples", "8", "--checks", CHECKS)
    took = time.monotonic() - started
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary
    assert "5/5" in summary and "generated" in summary, summary  # every operation was tested
    assert httpx.get(f"{fuzz_server}/health").json()["status"] == "ok"
    ok = httpx.post(f"{fuzz_server}/v1/completions", json={"prompt": "ab", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200, ok.text
    print(f"schemathesis: {took:.0f} s")


def test_the_fuzzer_catches_a_server_that_breaks_its_schema(tok):
    """Negative control: a 5xx on one field, and a schema looser than the validation, are found."""
    from fastapi import HTTPException

    gen = SpeculativeGenerator.from_models(tiny.model(max_positions=64), tok, "ngram")
    app = create_app(gen, "tiny", default_k=3, default_max_tokens=4)

    @app.middleware("http")
    async def broken(request, call_next):
        body = await request.body()
        if b'"seed"' in body:
            raise HTTPException(status_code=500, detail="planted server error")
        return await call_next(request)

    with live_server(app) as (url, _):
        run = schemathesis(url, "--phases", "coverage", "--max-examples", "2", "--checks", "not_a_server_error",
                           "--include-path", "/v1/completions")
    assert run.returncode != 0 and "Server error" in run.stdout, run.stdout[-3000:]


def test_openapi_documents_every_honoured_field_with_its_bounds(fuzz_server):
    doc = httpx.get(f"{fuzz_server}/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def field(model: str, name: str) -> dict:
        prop = schemas[model]["properties"][name]
        branches = prop.get("anyOf", [prop])
        return next(b for b in branches if b.get("type") not in ("null", "boolean") or "$ref" in b)

    bounded = {"temperature": (0, None), "top_p": (None, 1), "min_p": (0, 1), "n": (1, 16), "top_k": (-1, None),
               "seed": (0, 2**53 - 1), "max_tokens": (1, None), "top_logprobs": (0, 20), "presence_penalty": (-2, 2),
               "frequency_penalty": (-2, 2)}
    for model in ("CompletionRequest", "ChatRequest"):
        for name, (lo, hi) in bounded.items():
            got = field(model, name)
            assert got.get("minimum", got.get("exclusiveMinimum")) == lo or lo is None, (model, name, got)
            assert got.get("maximum") == hi or hi is None, (model, name, got)
        for name in ("stop", "stop_token_ids", "ignore_eos", "stream", "logprobs", "logit_bias", "response_format",
                     "structured_outputs", "speculative", "sampler", "repetition_penalty", "logprobs_mode", "user"):
            assert name in schemas[model]["properties"], (model, name)
    assert field("CompletionRequest", "logprobs")["maximum"] == 20
    assert schemas["Speculative"]["properties"]["tree"]["maximum"] == 64
    assert schemas["ChatRequest"]["then"]["required"] == ["logprobs"]  # top_logprobs needs logprobs: true
    completions = doc["paths"]["/v1/completions"]["post"]["responses"]
    assert {"200", "400", "404", "429", "503"} <= set(completions)
