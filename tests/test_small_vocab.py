"""Models with small vocabularies (character-level, the kind built to test a pipeline): every
start-up measurement uses tokens the model has, so serving and every proposer work whatever the
vocabulary's size."""

import os
import subprocess
import sys
import time

import httpx
import pytest

import tiny
from live_server import free_port
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.policy.calibration import CalibrationError, calibrate, token_ids
from specdecode.policy.costs import PassCosts
from specdecode.proposers import PROPOSERS

# (alphabet, vocabulary size): under 33 and under 129 tokens, the sizes issue 36 names.
SMALL = [(tiny.LOWER, 31), (tiny.PRINTABLE, 100)]


@pytest.fixture(scope="module", params=SMALL, ids=[f"vocab{v}" for _, v in SMALL])
def small(request, tmp_path_factory):
    alphabet, vocab = request.param
    tok = tiny.char_tokenizer(alphabet)
    assert len(tok) == vocab
    target, draft = tiny.small_vocab_model(tok, seed=0), tiny.small_vocab_model(tok, seed=1, hidden=16)
    root = tmp_path_factory.mktemp(f"vocab{vocab}")
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return {"tok": tok, "target": target, "draft": draft, "dirs": {n: str(root / n) for n in ("target", "draft")},
            "vocab": vocab}


def test_token_ids_stay_inside_any_vocabulary():
    for vocab in (1, 2, 31, 100, 151936):
        ids = token_ids(300, vocab)
        assert len(ids) == 300 and min(ids) >= 0 and max(ids) < vocab


def test_calibration_runs_on_a_small_vocabulary(small):
    gen = SpeculativeGenerator.from_models(small["target"], small["tok"], "draft", small["draft"], small["tok"])
    gen.calibrate()  # fed ids up to 128 before, past a 31- or 100-token embedding table
    assert gen.pass_costs.verify(1) > 0 and gen.pass_costs.draft(1) > 0


def test_calibration_refuses_a_model_it_cannot_run_in_one_line():
    class NoContext:
        vocab_size, max_context, backend = 31, 1, "torch"

    with pytest.raises(CalibrationError, match="target model .* holds 1 positions"):
        calibrate(PassCosts(), NoContext())


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_generate_with_every_proposer_equals_plain_greedy(small, proposer):
    gen = SpeculativeGenerator.from_models(small["target"], small["tok"], "draft", small["draft"], small["tok"])
    params = SamplingParams(max_new_tokens=24, temperature=0.0, ignore_eos=True)
    prompt = "the cat sat on the mat and the cat sat on the"
    plain = gen.generate(prompt, params, proposer="none").token_ids
    out = gen.generate(prompt, params, proposer=proposer, k=3).token_ids
    assert out == plain and len(out) == 24 and max(out) < small["vocab"]


def test_serve_answers_a_completion_on_a_small_vocabulary(small):
    """The real `specdecode serve` command: start-up calibration, the grammar compiler, a request."""
    port = free_port()
    cmd = [sys.executable, "-m", "specdecode", "serve", "--target", small["dirs"]["target"], "--draft",
           small["dirs"]["draft"], "--proposer", "draft", "--dtype", "float32", "--port", str(port), "--served-model-name", "x"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "SPECDECODE_DEBUG": ""})
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read()
        body = {"model": "x", "prompt": "the cat sat", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        r = httpx.post(f"{base}/v1/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_refuses_an_unmeasurable_model_in_one_line(tmp_path):
    tok = tiny.char_tokenizer(tiny.LOWER)
    model = tiny.small_vocab_model(tok)
    model.config.max_position_embeddings = 1
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    out = subprocess.run([sys.executable, "-m", "specdecode", "serve", "--target", str(tmp_path / "m"), "--proposer",
                          "ngram", "--dtype", "float32", "--port", str(free_port())],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "SPECDECODE_DEBUG": ""})
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot serve --target") and "holds 1 positions" in last, out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
