"""--dtype auto: the fastest dtype on this machine for the role, measured once and cached per machine."""

import json

import pytest

from specdecode.backends import dtype_choice
from specdecode.backends.hf import parse_dtype


def ms(bf16, int8, w8a8):
    return {"bfloat16": dict(zip("15", bf16)), "int8": dict(zip("15", int8)), "w8a8": dict(zip("15", w8a8))}


def test_decide_takes_the_cheapest_step_for_the_role_and_says_by_how_much():
    slow_bf16 = ms((9.0, 10.0), (1.0, 1.5), (2.5, 5.0))
    dtype, why = dtype_choice.decide(slow_bf16, "target")
    assert dtype == "w8a8" and "2.5x faster than bfloat16 for a target" in why and "9.0 / 10.0 ms" in why
    assert "int8" not in why.split("(")[1]  # never a candidate for a target: its rows share a scale
    dtype, why = dtype_choice.decide(slow_bf16, "draft")
    assert dtype == "int8" and "3.0x faster than w8a8 for a draft" in why
    amx = ms((1.0, 1.2), (1.0, 2.0), (2.5, 5.0))
    assert dtype_choice.decide(amx, "target")[0] == "bfloat16" and dtype_choice.decide(amx, "draft")[0] == "bfloat16"
    # Flat but slow at one token loses to cheap-at-one-token when the sum says so, and not otherwise.
    assert dtype_choice.decide(ms((4.0, 4.0), (9, 9), (1.0, 6.0)))[0] == "w8a8"
    assert dtype_choice.decide(ms((4.0, 4.0), (9, 9), (1.0, 8.0)))[0] == "bfloat16"


def test_the_choice_is_measured_once_per_machine(tmp_path, monkeypatch):
    calls = []

    def fake_measure():
        calls.append(1)
        return ms((9.0, 10.0), (1.0, 2.0), (2.0, 4.0))

    monkeypatch.setattr(dtype_choice, "measure", fake_measure)
    monkeypatch.setattr(dtype_choice.torch.cuda, "is_available", lambda: False)
    first = dtype_choice.choice("target", tmp_path)
    again = dtype_choice.choice("target", tmp_path)
    draft = dtype_choice.choice("draft", tmp_path)
    assert first == again and first["dtype"] == "w8a8" and draft["dtype"] == "int8" and len(calls) == 1
    (saved,) = tmp_path.glob("dtype-*.json")
    found = json.loads(saved.read_text())
    assert found["ms"]["w8a8"]["1"] == 2.0
    assert "cores" in found["machine"] and isinstance(found["machine"]["flags"], list)
    # Another machine (another CPU, core count or torch) measures anew.
    monkeypatch.setattr(dtype_choice, "machine_key", lambda: "another-machine")
    dtype_choice.choice("target", tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("dtype-*.json"))) == 2


def test_auto_resolves_to_the_cached_choice_for_the_role(monkeypatch):
    monkeypatch.setattr(dtype_choice, "choice", lambda role="target", cache=None: {"dtype": f"{role}-pick"})
    assert parse_dtype("auto") == "target-pick" and parse_dtype("AUTO", "draft") == "draft-pick"
    assert parse_dtype("fp32") == "float32"  # an explicit dtype is never second-guessed
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        parse_dtype("int3")


def test_a_real_measurement_times_every_candidate_at_every_width(monkeypatch):
    monkeypatch.setattr(dtype_choice, "LAYERS", 2)
    monkeypatch.setattr(dtype_choice, "ROUNDS", 1)
    times = dtype_choice.measure()
    assert set(times) == set(dtype_choice.CANDIDATES)
    assert all(times[d][str(w)] > 0 for d in times for w in dtype_choice.WIDTHS)
    assert dtype_choice.decide(times, "target")[0] in dtype_choice.FOR_ROLE["target"]
