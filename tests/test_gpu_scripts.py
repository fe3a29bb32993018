"""The GPU cost scripts, run on the CPU with tiny shapes (eager runners only), so that they still
work when the next GPU is lent; and the merge of two runs in the table script."""

import json
import subprocess
import sys
from pathlib import Path

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
