"""`specdecode tune --endpoint`: vLLM's counters parsed as vLLM exports them; on our real server
after a workload, the k it recommends agrees with what our own in-process `tune` finds on the same
models and workload; the errors a user can make."""

import copy
import json
from pathlib import Path

import pytest
import torch

import tiny
from clirun import run_cli
from live_server import live_server
from specdecode import SpeculativeGenerator
from specdecode.advise import endpoint_tune as tuning
from specdecode.engine.engine import EngineConfig
from specdecode.server import create_app

VLLM = (Path(__file__).parent / "data" / "vllm_metrics.txt").read_text()


def test_vllm_counters_parse_into_per_position_acceptance():
    c = tuning.parse_metrics(VLLM)
    assert c.engine == "vllm" and c.drafts == 2000 and c.draft_tokens == 8000 and c.accepted == 4000
    assert c.per_pos == {0: 1600, 1: 1200, 2: 800, 3: 400}  # summed over the two engines
    acc = tuning.acceptance(c - tuning.Counters())
    assert acc.accepted_at == pytest.approx([0.8, 0.6, 0.4, 0.2]) and acc.server_k == 4
    # A flat verify curve (a GPU): each k up to the server's 4 pays; tokens per pass 1 + 2.0 = 3.0.
    picks = tuning.recommend(acc, {1: 0.01, 64: 0.01}, 0.0, [1])
    assert picks[0]["k"] == 4 and picks[0]["speedup"] == pytest.approx(3.0)
    # A steep one (a CPU: each token scored costs a full pass): speculation does not pay.
    assert tuning.recommend(acc, {1: 0.01, 2: 0.02, 8: 0.08}, 0.003, [1])[0]["k"] == 0
    # Concurrency: at 8 rows the same flat-then-steep curve prices k lower than at 1.
    curve = {1: 0.010, 8: 0.011, 16: 0.020, 64: 0.080}
    one, eight = tuning.recommend(acc, curve, 0.001, [1, 8])
    assert one["k"] > eight["k"]
    assert tuning.flag("vllm", "0.11.0", 3) == ("--speculative-config '{\"num_speculative_tokens\": 3}' (keep your "
                                                "method and model keys)")
    assert tuning.flag("vllm", "0.6.3", 3) == "--num-speculative-tokens 3"


def test_counters_without_positions_get_an_iid_fit_and_a_quiet_server_is_refused():
    text = "\n".join(line for line in VLLM.splitlines() if "per_pos" not in line)
    acc = tuning.acceptance(tuning.parse_metrics(text) - tuning.Counters())
    assert acc.model == "i.i.d. fit" and len(acc.accepted_at) == 4
    r = acc.accepted_at[0]
    assert sum(r ** i for i in range(1, 5)) == pytest.approx(2.0, rel=1e-6)  # 4000 accepted / 2000 passes
    with pytest.raises(tuning.TuneError, match="checked no drafts"):
        tuning.acceptance(tuning.parse_metrics(VLLM) - tuning.parse_metrics(VLLM))


PROPOSER, DRAFT_COST = "ngram", ("--draft-cost", "0")  # a lookup costs nothing beside a pass


def test_endpoint_recommendation_agrees_with_our_tune(tmp_path, tok, capsys, monkeypatch):
    target = tiny.model(seed=0)
    draft = copy.deepcopy(target)  # the target's head a little perturbed: acceptance high but not certain
    with torch.no_grad():
        torch.manual_seed(7)
        draft.lm_head.weight = torch.nn.Parameter(target.lm_head.weight.detach()
                                                  + 0.15 * torch.randn_like(target.lm_head.weight) *
                                                  target.lm_head.weight.std())
    for name, model in (("target", target), ("draft", draft)):
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    workload = ("--workload", "code", "--limit", "6", "--max-new-tokens", "48")
    ours = run_cli(capsys, monkeypatch, "tune", "--target", str(tmp_path / "target"), "--draft",
                   str(tmp_path / "draft"), "--proposer", PROPOSER, "--k", "1,2,3,4,6,8", "--dtype", "fp32",
                   "--measure", "none", "--device", "cpu", "--json", *workload)
    (tmp_path / "tune.json").write_text(json.dumps(ours))
    plain = next(r for r in ours["table"] if r["proposer"] == "none")["predicted_tokens_per_s"]
    ours_speedup = ours["predicted_tokens_per_s"] / plain
    gen = SpeculativeGenerator.from_models(target, tok, PROPOSER, draft, tok,
                                           config=EngineConfig(max_batch=4, load_policy=False))
    with live_server(create_app(gen, "tiny", default_k=8)) as (url, _):
        got = run_cli(capsys, monkeypatch, "tune", "--endpoint", url, "--cost-curve", str(tmp_path / "tune.json"),
                      "--requests", "6", "--json", *workload, *DRAFT_COST)
    level = got["levels"][0]
    assert got["engine"] == "specdecode" and level["acceptance_model"] == "per-position"
    assert got["verify_curve"].startswith("measured")  # priced at our tune's curve, and it says so
    assert level["server_k"] > 2  # up to 8 a pass; the lookup drafts fewer where its match is short
    assert level["k"] == ours["k"] or abs(level["speedup"] / ours_speedup - 1) <= 0.05, (level, ours["k"],
                                                                                          ours_speedup)
    assert level["flag"].startswith(f"specdecode serve --k {level['k']}")


def test_clear_errors(tmp_path, tok, capsys, monkeypatch):
    gen = SpeculativeGenerator.from_models(tiny.model(), tok, "none")
    with live_server(create_app(gen, "tiny")) as (url, _):
        err = run_cli(capsys, monkeypatch, "tune", "--endpoint", url, code=2)["stderr"]
        assert "give --cost-curve FILE" in err
        (tmp_path / "bad.json").write_text("{}")
        err = run_cli(capsys, monkeypatch, "tune", "--endpoint", url, "--cost-curve", str(tmp_path / "bad.json"),
                      code=2)["stderr"]
        assert err.startswith("error: --cost-curve") and "Traceback" not in err
        err = run_cli(capsys, monkeypatch, "tune", "--endpoint", url, "--draft-cost", "0.3", "--requests", "2",
                      "--max-new-tokens", "4", "--limit", "2", code=2)["stderr"]
        assert "checked no drafts" in err  # a plain server: its counters never move
        # The options of the other mode are refused, not dropped.
        err = run_cli(capsys, monkeypatch, "tune", "--endpoint", url, "--k", "2,4", "--save", "x.json",
                      code=2)["stderr"]
        assert "--k, --save have no effect with --endpoint" in err
    err = run_cli(capsys, monkeypatch, "tune", "--draft-cost", "0.3", "--window", "5", code=2)["stderr"]
    assert "--draft-cost, --window have no effect without --endpoint" in err
