"""--dtype auto: the faster of bf16 and fp32 on this machine, measured once and cached per machine."""

import json

import pytest

from specdecode.models.backends import dtype_choice
from specdecode.models.backends.hf import parse_dtype


def ms(bf16, fp32, w8a8):
    return {"bfloat16": dict(zip("15", bf16)), "float32": dict(zip("15", fp32)), "w8a8": dict(zip("15", w8a8))}


def test_decide_takes_the_cheaper_of_bf16_and_fp32_and_says_what_w8a8_would_gain():
    slow_bf16 = ms((9.0, 10.0), (8.0, 11.5), (2.5, 5.0))
    dtype, why = dtype_choice.decide(slow_bf16)
    assert dtype == "bfloat16" and "1.0x faster than float32" in why and "9.0 / 10.0 ms" in why
    assert "--dtype w8a8 would be 2.53x faster" in why  # reported, never chosen: it changes the model
    amx = ms((1.0, 1.2), (3.0, 3.5), (2.5, 5.0))
    dtype, why = dtype_choice.decide(amx)
    assert dtype == "bfloat16" and "3.0x faster than float32" in why and "would be" not in why
    # Flat but slow at one token loses to cheap-at-one-token when the sum says so, and not otherwise.
    assert dtype_choice.decide(ms((4.0, 4.0), (1.0, 6.0), (9, 9)))[0] == "float32"
    assert dtype_choice.decide(ms((4.0, 4.0), (1.0, 8.0), (9, 9)))[0] == "bfloat16"


def test_the_choice_is_measured_once_per_machine(tmp_path, monkeypatch):
    calls = []

    def fake_measure():
        calls.append(1)
        return ms((9.0, 10.0), (5.0, 6.0), (2.0, 4.0))

    monkeypatch.setattr(dtype_choice, "measure", fake_measure)
    monkeypatch.setattr(dtype_choice.torch.cuda, "is_available", lambda: False)
    first = dtype_choice.choice(tmp_path)
    again = dtype_choice.choice(tmp_path)
    assert first == again and first["dtype"] == "float32" and len(calls) == 1
    (saved,) = tmp_path.glob("dtype-*.json")
    found = json.loads(saved.read_text())
    assert found["ms"]["w8a8"]["1"] == 2.0
    assert "cores" in found["machine"] and isinstance(found["machine"]["flags"], list)
    # Another machine (another CPU, core count or torch) measures anew.
    monkeypatch.setattr(dtype_choice, "machine_key", lambda: "another-machine")
    dtype_choice.choice(tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("dtype-*.json"))) == 2


def test_auto_resolves_to_the_cached_choice(monkeypatch):
    monkeypatch.setattr(dtype_choice, "choice", lambda cache=None: {"dtype": "float32"})
    assert parse_dtype("auto") == "float32" and parse_dtype("AUTO") == "float32"
    assert parse_dtype("w8a8") == "w8a8" and parse_dtype("bf16") == "bfloat16"
    assert parse_dtype("fp32") == "float32"  # an explicit dtype is never second-guessed
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        parse_dtype("int3")


def test_a_real_measurement_times_every_candidate_at_every_width(monkeypatch):
    monkeypatch.setattr(dtype_choice, "LAYERS", 2)
    monkeypatch.setattr(dtype_choice, "ROUNDS", 1)
    times = dtype_choice.measure()
    assert set(times) == set(dtype_choice.CANDIDATES)
    assert all(times[d][str(w)] > 0 for d in times for w in dtype_choice.WIDTHS)
    assert dtype_choice.decide(times)[0] in dtype_choice.AUTO
