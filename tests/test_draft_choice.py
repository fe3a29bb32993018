"""--draft auto: the default draft on the runtime measured fastest beside the target, once per machine."""

import json

import pytest
import torch

import tiny
from specdecode.models import draft_choice
from specdecode.models.generator import load_models
from specdecode.models.loader import as_runner
from specdecode.models.registry import ModelError


def test_agreement_is_the_acceptance_of_the_rejection_rule():
    p = torch.log(torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7]]))
    same = draft_choice.agreement(p, p)
    assert same == {"greedy": 1.0, "sampled": 1.0}
    q = torch.log(torch.tensor([[1.0, 0.0, 0.0], [0.7, 0.2, 0.1]]))
    found = draft_choice.agreement(p, q)
    # Row 1: sum min = 0.5 (argmax: a tie, broken to token 0 on both sides); row 2: 0.1 + 0.2 + 0.1.
    assert found["sampled"] == pytest.approx((0.5 + 0.4) / 2, abs=1e-4)
    assert found["greedy"] == 0.5
    # A draft with a wider vocabulary is compared on the target's tokens only.
    wide = torch.cat([q, torch.zeros(2, 4)], dim=1)
    assert draft_choice.agreement(p, wide)["greedy"] <= 0.5


def measured(drafts, verify_ms=(100, 102, 104, 106, 108, 110, 112, 114, 116)):
    return {"drafts": drafts, "verify_ms": {str(w + 1): ms for w, ms in enumerate(verify_ms)}}


def test_decide_weighs_cost_against_acceptance():
    cheap = {"greedy": 0.7, "sampled": 0.6, "draft_ms": 8.0}
    dear = {"greedy": 0.75, "sampled": 0.65, "draft_ms": 40.0}
    found = draft_choice.decide(measured({"dear": dear, "cheap": cheap}))
    assert found["choice"] == "cheap" and "next best dear" in found["why"]
    assert found["table"]["cheap"]["c"] == 0.08 and found["table"]["cheap"]["k_greedy"] >= 2
    assert found["table"]["cheap"]["speedup_greedy"] > found["table"]["dear"]["speedup_greedy"] > 1
    # Much better acceptance pays for a somewhat dearer token.
    good = {"greedy": 0.95, "sampled": 0.9, "draft_ms": 12.0}
    assert draft_choice.decide(measured({"cheap": cheap, "good": good}))["choice"] == "good"
    # A draft that costs as much as the target never pays: k = 0, plain speed.
    useless = draft_choice.decide(measured({"slow": {"greedy": 0.5, "sampled": 0.4, "draft_ms": 100.0}}))
    assert useless["table"]["slow"]["k_greedy"] == 0 and useless["table"]["slow"]["speedup_greedy"] == 1.0


def test_measure_reads_the_text_and_leaves_the_runners_empty(target_model, tok):
    twin, other = tiny.model(hidden=64, layers=2, seed=0), tiny.model(hidden=32, layers=1, seed=1)
    target = as_runner(target_model)
    drafts = {"twin": as_runner(twin), "other": as_runner(other)}
    ids = draft_choice.calibration_ids(tok)
    assert len(ids) > 100
    found = draft_choice.measure(target, drafts, ids)
    assert found["drafts"]["twin"]["greedy"] == 1.0 and found["drafts"]["twin"]["sampled"] > 0.999
    assert found["drafts"]["other"]["sampled"] < 0.9  # the control: a different model disagrees
    assert all(found["drafts"][n]["draft_ms"] > 0 for n in drafts)
    # A token of a prefill costs less than a one-token step (one pass reads the weights for them all).
    assert all(0 < found["drafts"][n]["prefill_ms_per_token"] < found["drafts"][n]["draft_ms"] for n in drafts)
    assert sorted(map(int, found["verify_ms"])) == list(range(1, draft_choice.K_MAX + 2))
    assert target.rows == 0 and all(d.rows == 0 for d in drafts.values())


def test_choose_measures_once_skips_what_cannot_load_and_refuses_when_nothing_can(tiny_dirs, tmp_path, monkeypatch):
    target_model, tok, _, _ = load_models(tiny_dirs["target"], None, "float32")
    monkeypatch.setattr(draft_choice, "candidates",
                        lambda llamacpp: [tiny_dirs["target"], tiny_dirs["draft"], tiny_dirs["bigvocab"]])
    first = draft_choice.choose("tiny", target_model, tok, "float32", "float32", cache=tmp_path)
    # The twin is always accepted but costs about as much as the target, so which pays depends on
    # this machine's timing: the choice follows the rule on what was measured (best mean speedup,
    # ties to the cheaper draft).
    table = first["table"]
    assert table[tiny_dirs["target"]]["greedy"] == 1.0
    assert first["choice"] == max(table, key=lambda n: ((table[n]["speedup_greedy"] + table[n]["speedup_t1"]) / 2,
                                                        -table[n]["c"]))
    assert list(first["skipped"]) == [tiny_dirs["bigvocab"]] and "vocabular" in first["skipped"][tiny_dirs["bigvocab"]]
    assert first["machine"]["cores"] >= 1
    monkeypatch.setattr(draft_choice, "measure", lambda *a: pytest.fail("measured again"))
    assert draft_choice.choose("tiny", target_model, tok, "float32", "float32", cache=tmp_path) == first
    (saved,) = tmp_path.glob("draft-*.json")
    assert json.loads(saved.read_text())["choice"] == first["choice"]
    assert draft_choice.cached(tmp_path) == [first]
    # Another target (or dtype) is measured apart; one whose vocabulary no candidate shares is refused.
    monkeypatch.setattr(draft_choice, "candidates", lambda llamacpp: [tiny_dirs["bigvocab"]])
    with pytest.raises(ModelError, match="name a draft with --draft"):
        draft_choice.choose("tiny", target_model, tok, "float32", "float32", cache=tmp_path)


def test_load_models_resolves_auto_to_the_choice(tiny_dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(draft_choice, "candidates", lambda llamacpp: [tiny_dirs["draft"]])
    from specdecode import SpeculativeGenerator

    gen = SpeculativeGenerator.from_pretrained(target=tiny_dirs["target"], draft="auto", dtype="float32")
    assert gen.info["draft"] == tiny_dirs["draft"] and gen.info["draft_choice"]["choice"] == tiny_dirs["draft"]
    assert "predicted" in gen.info["draft_choice"]["why"]


def test_models_reports_what_auto_chose(tiny_dirs, tmp_path, monkeypatch, capsys):
    import sys

    from specdecode import cli
    from specdecode.models.backends import dtype_choice

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    monkeypatch.setattr(dtype_choice, "choice", lambda cache=None: {"dtype": "bfloat16", "why": "measured"})
    monkeypatch.setattr(sys, "argv", ["specdecode", "models"])

    def models() -> str:
        try:
            cli.main()
        except SystemExit as exc:
            assert not exc.code
        return " ".join(capsys.readouterr().out.split())  # rich wraps lines at the terminal's width

    assert "--draft auto: not measured on this machine yet" in models()
    monkeypatch.setattr(draft_choice, "candidates", lambda llamacpp: [tiny_dirs["draft"]])
    target_model, tok, _, _ = load_models(tiny_dirs["target"], None, "float32")
    draft_choice.choose("tiny", target_model, tok, "float32", "float32")
    out = models()
    assert f"--draft auto beside tiny (float32; draft float32): {tiny_dirs['draft']} (predicted" in out


def test_when_no_draft_pays_the_cheapest_is_chosen():
    # Against a cheap one-token target pass no draft pays (every prediction is plain speed): the
    # tie goes to the cheapest draft, never to whichever was listed first.
    dear = {"greedy": 0.77, "sampled": 0.77, "draft_ms": 200.0}
    cheap = {"greedy": 0.75, "sampled": 0.74, "draft_ms": 9.0}
    found = draft_choice.decide(measured({"dear": dear, "cheap": cheap}, verify_ms=(27, 50, 64, 49, 69, 85, 103, 87, 107)))
    assert found["table"]["dear"]["speedup_greedy"] == found["table"]["cheap"]["speedup_greedy"] == 1.0
    assert found["choice"] == "cheap"
