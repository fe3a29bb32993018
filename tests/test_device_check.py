"""`specdecode profile device`, the check a lent GPU runs, rehearsed on the CPU with tiny shapes (eager
runners only), so that it still works when the next GPU is lent."""

import json
import subprocess
import sys

import pytest

from clirun import run_cli


def specdecode(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdecode", *args], capture_output=True, text=True, timeout=300)


def test_device_check_rehearses_on_the_cpu(tmp_path):
    """The whole device check with tiny shapes: timings per runner, c, modelled speedups from a bench
    results.json, verify on the device path (the rule passes, the naive residual fails), the tables."""
    results = {"results": [
        {"method": "draft", "category": "all", "k": 8, "temperature": 0.0,
         "per_position_acceptance": [0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.08, 0.05]},
        {"method": "plain", "category": "all", "k": 0, "temperature": 0.0, "per_position_acceptance": []}]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    done = specdecode("profile", "device", str(tmp_path / "out"), "--small", "--acceptance",
                      str(tmp_path / "results.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "all checks passed" in done.stdout
    d = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert d["skipped"] == [] and set(d["pairs"]) == {"8b", "default"}
    assert d["acceptance"]["T=0"][:2] == pytest.approx([0.8, 0.75])  # conditional: 0.6 of the 0.8 that reached position 2
    for pair in d["pairs"].values():
        assert set(pair["c"]) == {"torch-slots", "torch"}  # no GPU: the captured runner is not timed
        assert sorted(int(w) for w in pair["target"]["verify_s"]["torch-slots"]) == list(range(1, 10))
        for modelled in pair["modelled"].values():
            assert 0 <= modelled["T=0"]["k"] <= 8 and modelled["T=0"]["speedup"] > 0
        for role in ("target", "draft"):
            assert pair[role]["roofline_step_s"] > 0 and pair[role]["weight_bytes_read"] > 0
    # The 8B-shaped pair's target has an untied input embedding, read one row per token: not in the
    # bytes a step reads.
    target = d["pairs"]["8b"]["target"]
    assert target["weight_bytes_read"] < target["params"] * 2
    ex = d["exactness"]
    assert ex["rule"]["passed"] is True and ex["naive"]["passed"] is False
    assert ex["rule"]["backend"] == "torch-slots"
    assert [c["check"] for c in d["checks"]] == ["verify passes, --naive fails (tiny models)"]
    tables = specdecode("profile", "device", "--render", str(tmp_path / "out" / "gpu_check.json")).stdout
    assert tables == (tmp_path / "out" / "gpu_check.md").read_text()
    assert "tiny (rehearsal) shapes" in tables and "T=0: k, speedup" in tables


def test_the_verdicts_read_the_measurements():
    """The verdicts read the measurements: a step far above the roofline fails its limit."""
    from specdecode.bench.device_report import checks

    kind = "torch-cudagraph"
    result = {"pairs": {"8b": {"target": {"step_s": {kind: 0.030}, "roofline_step_s": 0.010,
                                          "verify_s": {kind: {"5": 0.033}}},
                               "draft": {"step_s": {kind: 0.006}}}}}
    verdicts = {row["check"]: row["passed"] for row in checks(result)}
    assert verdicts == {"8B target step / roofline": False, "verify width 5 / one-token step": True,
                        "draft c (1B / 8B step)": True}


@pytest.mark.parametrize("args,message", [
    ((), "give OUT (a folder for gpu_check.json) or --render FILE"),
    (("--render", "/no/such.json"), "no such file (give a gpu_check.json)"),
    (("OUT", "--acceptance", "/no/such.json"), "no such file (give a bench results.json)"),
])
def test_bad_device_check_arguments_are_refused(capsys, monkeypatch, args, message):
    assert message in run_cli(capsys, monkeypatch, "profile", "device", *args, code=2)["stderr"]
