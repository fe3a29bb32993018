"""The GPU cost scripts, run on the CPU with tiny shapes (eager runners only), so that they still
work when the next GPU is lent; and the merge of two runs in the table script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent.parent / "scripts"


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_costs_then_tables(tmp_path):
    run(str(SCRIPTS / "gpu_costs.py"), str(tmp_path / "a"), "--small", "--runners", "torch,torch-static",
        "--verify-widths", "")
    d = json.loads((tmp_path / "a" / "gpu_costs.json").read_text())
    assert d["skipped"] == []
    target, draft = d["models"]["target"], d["models"]["draft"]
    for m in (target, draft):
        assert set(m["step_s"]) == {"torch", "torch-static"} and all(s > 0 for s in m["step_s"].values())
        assert m["roofline_step_s"] > 0 and m["weight_bytes_read"] > 0
    assert sorted(int(w) for w in target["verify_s"]["torch-static"]) == list(range(1, 17)) + [24, 32, 48, 64]
    # The untied input embedding is read one row per token, so it is not in the bytes a step reads.
    assert target["weight_bytes_read"] < target["params"] * 2

    # A second run that adds a compiled curve (no width 1: that is its one-token step).
    second = json.loads(json.dumps(d))
    for m in second["models"].values():
        m["step_s"] = {"torch-static": 99.0, "torch-cudagraphs": 0.5}
        m["verify_s"] = {}
    second["models"]["target"]["verify_s"] = {"torch-cudagraphs": {"2": 0.6, "5": 0.75}}
    (tmp_path / "b.json").write_text(json.dumps(second))
    out = run(str(SCRIPTS / "gpu_table.py"), str(tmp_path / "t"), str(tmp_path / "a" / "gpu_costs.json"),
              str(tmp_path / "b.json"))
    assert (tmp_path / "t" / "verify_cost.png").stat().st_size > 0
    # The later run adds what the first lacked and does not overwrite what it had.
    assert "| torch-cudagraphs | 1.00 (500.0 ms) | 1.20 (600.0 ms) | - | 1.50 (750.0 ms) |" in out
    assert "99000" not in out  # torch-static's step stays the first run's
    # Modelled speedup with c = 1 (draft step = target step 0.5 s), a = 0.6, k = 1: 1.6 tokens per
    # 0.5 + 0.6 s, against 1.6 x 0.5 s plain = 0.73x.
    assert "| torch-cudagraphs | 0.6 | 0.73 | - | - | 0.42 |" in out


def test_gpu_check_rehearses_on_the_cpu(tmp_path):
    """The whole device check with tiny shapes: timings per runner, c, modelled speedups from a bench
    results.json, verify on the device path (the rule passes, the naive residual fails), the tables."""
    results = {"results": [
        {"method": "draft", "category": "all", "k": 8, "temperature": 0.0,
         "per_position_acceptance": [0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.08, 0.05]},
        {"method": "plain", "category": "all", "k": 0, "temperature": 0.0, "per_position_acceptance": []}]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    run(str(SCRIPTS / "gpu_check.py"), str(tmp_path / "out"), "--small", "--acceptance", str(tmp_path / "results.json"))
    d = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert d["skipped"] == [] and set(d["pairs"]) == {"8b", "default"}
    assert d["acceptance"]["T=0"][:2] == pytest.approx([0.8, 0.75])  # conditional: 0.6 of the 0.8 that reached position 2
    for pair in d["pairs"].values():
        assert set(pair["c"]) == {"torch-slots", "torch"}  # no GPU: the captured runner is not timed
        assert sorted(int(w) for w in pair["target"]["verify_s"]["torch-slots"]) == list(range(1, 10))
        for modelled in pair["modelled"].values():
            assert 0 <= modelled["T=0"]["k"] <= 8 and modelled["T=0"]["speedup"] > 0
    ex = d["exactness"]
    assert ex["rule"]["passed"] is True and ex["naive"]["passed"] is False
    assert ex["rule"]["backend"] == "torch-slots"
    assert [c["check"] for c in d["checks"]] == ["verify passes, --naive fails (tiny models)"]
    tables = run(str(SCRIPTS / "gpu_check.py"), "--render", str(tmp_path / "out" / "gpu_check.json"))
    assert tables == (tmp_path / "out" / "gpu_check.md").read_text()
    assert "tiny (rehearsal) shapes" in tables and "T=0: k, speedup" in tables
