"""The onnx backend (onnxruntime over an onnxruntime-genai export): the same logits as uncached
forwards through extend, rollback, buffer growth and reset; rows independent in one batched pass; greedy speculation equals plain in
its exact mode (fp32); `verify` passes on it and catches the naive residual; clear errors."""

import pytest
import torch

import tiny
from test_static_runner import reference_script, script
from test_verify import run_verify
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models import spec
from specdecode.models.backends import onnx
from specdecode.models.cache import ModelError
from specdecode.models.loader import load

pytestmark = pytest.mark.skipif(not onnx.available(), reason="the [onnx] extra is not installed")


@pytest.fixture(scope="module")
def exported_tiny(tmp_path_factory):
    """A tiny Qwen2 checkpoint on disk and the cache it is exported into (fp32: the exact mode)."""
    root = tmp_path_factory.mktemp("onnx")
    model = tiny.model(seed=3)
    model.save_pretrained(root / "tiny")
    tiny.tokenizer().save_pretrained(root / "tiny")
    return root, model


@pytest.fixture
def tiny_spec(exported_tiny, monkeypatch):
    root, model = exported_tiny
    monkeypatch.setenv("SPECDECODE_CACHE", str(root / "cache"))
    return f"onnx:{root / 'tiny'}@fp32", model


class OneRow:
    """A one-row runner seen as one sequence (the static runner's test script drives that)."""

    def __init__(self, runner):
        self.runner = runner
        runner.add_rows([])

    @property
    def length(self):
        return self.runner.length(0)

    def forward(self, tokens, all_logits=False):
        return self.runner.forward([tokens], last_only=not all_logits)[0]

    def truncate(self, length):
        self.runner.rollback([self.length - length])

    def reset(self):
        self.runner.remove_rows([0])
        self.runner.add_rows([])


def test_onnx_row_equals_uncached_forwards_through_rollback_growth_and_reset(tiny_spec, monkeypatch):
    text, model = tiny_spec
    monkeypatch.setattr(onnx.OrtRunner, "initial_capacity", 8)  # grows 8 -> 16 -> 32 inside the script
    runner, _ = load(text, "target", "fp32")
    assert runner.backend == "onnxruntime"
    got, length = script(OneRow(runner))
    assert length == 4 and runner.capacity == 32
    for want, have in zip(reference_script(model), got):
        assert want.shape == have.shape
        torch.testing.assert_close(want, have, rtol=1e-4, atol=1e-4)
    # Control: the logits of another model differ, so the comparison can fail.
    other = reference_script(tiny.model(seed=4))
    assert not torch.allclose(other[0], got[0], atol=1e-3)


def test_onnx_export_is_cached_and_rows_in_one_pass_do_not_see_each_other(tiny_spec, exported_tiny, monkeypatch):
    text, model = tiny_spec
    # Rows outgrow their first buffers in the passes below: what they held is carried over.
    monkeypatch.setattr(onnx.OrtRunner, "initial_capacity", 4)
    runner, _ = load(text, "target", "fp32")
    stamp = next((exported_tiny[0] / "cache" / "onnx").iterdir()) / ".complete"
    before = stamp.stat().st_mtime_ns
    load(text, "target", "fp32")  # a second load reuses the export
    assert stamp.stat().st_mtime_ns == before

    def same(got, seq, n):
        torch.testing.assert_close(got, tiny.reference_logits(model, seq, n), rtol=1e-4, atol=1e-4)

    runner.add_rows([5, 6, 7])
    runner.add_rows([9, 9], count=2)  # prefilled once, copied to the second row
    out = runner.forward([[8, 1, 2], [3], []])  # wider than one token: row by row
    assert [o.shape[0] for o in out] == [3, 1, 0] and runner.capacity == 8
    same(out[0], [5, 6, 7, 8, 1, 2], 3)
    same(out[1], [9, 9, 3], 1)
    runner.rollback([2, 0, 0])
    out = runner.forward([[4], [], [1]])  # one batched pass; the row between fed nothing keeps its length
    same(out[0], [5, 6, 7, 8, 4], 1)
    same(out[2], [9, 9, 1], 1)
    assert out[1].shape[0] == 0 and runner.length(1) == 3
    same(runner.forward([[], [4], []])[1], [9, 9, 3, 4], 1)
    runner.remove_rows([0])
    out = runner.forward([[6], [6]])
    same(out[0], [9, 9, 3, 4, 6], 1)
    same(out[1], [9, 9, 1, 6], 1)
    assert [runner.length(b) for b in range(runner.rows)] == [5, 4]


def test_greedy_speculation_over_onnx_equals_plain(tiny_spec, tok):
    text, _ = tiny_spec
    target, _ = load(text, "target", "fp32")
    gen = SpeculativeGenerator.from_models(target, tok, "draft", tiny.model(hidden=32, layers=1, seed=1), tok)
    plain_target, _ = load(text, "target", "fp32")
    plain = SpeculativeGenerator.from_models(plain_target, tok, "none")
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    for prompt in ("def f(x):", "abcabcabcabc"):
        want = plain.generate(prompt, params, k=0, chat=False).token_ids
        assert gen.generate(prompt, params, k=3, chat=False).token_ids == want
        assert gen.generate(prompt, params, k="auto", proposer="ngram", chat=False).token_ids == want
    tiny.batch_equals_plain(gen, plain, params)


def test_verify_passes_on_onnx_and_catches_the_naive_residual(tiny_spec, tiny_dirs, monkeypatch, capsys):
    dirs = {"target": tiny_spec[0], "draft": tiny_dirs["draft"]}
    report = run_verify(monkeypatch, capsys, dirs, "--seed", "1")
    assert report["passed"], report
    report = run_verify(monkeypatch, capsys, dirs, "--seed", "2", "--naive", code=1)
    assert not report["results"]["draft"]["first_token_exact"]["passed"]


def test_onnx_specs_are_checked(tiny_spec, monkeypatch):
    with pytest.raises(ModelError, match="unknown onnx precision 'q4_0'"):
        spec.ModelSpec.parse("onnx:default@q4_0")
    with pytest.raises(ModelError, match="shortlist runs on the hf and llamacpp"):
        load(tiny_spec[0] + "+v128", "draft", "fp32")
    monkeypatch.setattr(onnx, "available", lambda: False)
    with pytest.raises(ModelError, match=r"pip install 'specdecode\[onnx\]'"):
        load(tiny_spec[0], "target", "fp32")
