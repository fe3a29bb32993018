"""Planning arithmetic against hand-computed values (70B on H100, Qwen2.5-1.5B's real shape)."""

import json
import sys

import pytest
from transformers import Qwen2Config

from specdecode import cli
from specdecode.advise import plan as planner


def test_70b_on_h100_by_hand():
    shape = planner.shape_from_params(70e9)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (80, 8, 128)  # Llama-3-70B's shape
    inp = planner.PlanInput(shape, None, "bf16", device=planner.DEVICES["h100-80gb"], num_gpus=1, context=4096)
    r = planner.plan(inp)
    assert r["weight_bytes"] == pytest.approx(140e9)  # 70B at 2 bytes per weight
    assert r["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2 == 327_680
    assert r["kv_bytes_total"] == 327_680 * 4096
    assert r["workspace_bytes"] == pytest.approx(7e9 + 128256 * 4)
    assert not r["fits_one_device"] and not r["fits"]
    # 148.34 GB: TP=2 needs 74.2 GB per device > 72 GB (90% of 80), TP=4 needs 37.1 GB.
    assert r["min_tensor_parallel"] == 4
    r4 = planner.plan(planner.PlanInput(shape, None, "bf16", device=planner.DEVICES["h100-80gb"], num_gpus=4,
                                        context=4096))
    assert r4["fits"]
    memory = (140e9 - 128256 * 8192 * 2 + 327_680 * 2048) / 4 / 3350e9  # the embedding table is not read
    allreduce = 80 * 2 * (2 * 3 / 4 * 8192 * 2 / 450e9 + 8e-6)
    assert r4["plain_pass"]["memory_s"] == pytest.approx(memory)
    assert r4["plain_pass"]["allreduce_s"] == pytest.approx(allreduce)
    assert r4["plain_itl_s"] == pytest.approx(memory + allreduce)
    # The naive latency, 140 GB over one H100's bandwidth, is not what the plan reports.
    assert r4["plain_itl_s"] < 140e9 / 3350e9 / 3


def test_qwen_1_5b_from_its_config():
    config = Qwen2Config(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                         num_hidden_layers=28, vocab_size=151936, tie_word_embeddings=True)
    shape = planner.shape_from_config(config, "qwen2.5-1.5b")
    per_layer = 1536 * 128 * (12 + 4) + 12 * 128 * 1536 + 3 * 1536 * 8960
    assert shape.params == 28 * per_layer + 151936 * 1536 == 1_543_569_408
    r = planner.plan(planner.PlanInput(shape, None, "int8", kv_dtype="bf16", device=planner.DEVICES["cpu"],
                                       context=1024))
    assert r["kv_bytes_per_token"] == 2 * 28 * 2 * 128 * 2 == 28_672
    assert r["weight_bytes"] == pytest.approx(1_543_569_408)
    read = 1_543_569_408 - 151936 * 1536  # every weight once, the input embedding table excepted
    assert r["plain_pass"]["memory_s"] == pytest.approx((read + 28_672 * 512) / 27e9)


def test_speculative_rows_and_recommendation():
    t = planner.shape_from_params(8e9)
    d = planner.shape_from_params(1e9)
    r = planner.plan(planner.PlanInput(t, d, "bf16", device=planner.DEVICES["h100-80gb"], acceptance=0.8,
                                       k_values=[1, 2, 4, 8]))
    rows = {row["k"]: row for row in r["speculative"]}
    assert rows[4]["expected_tokens_per_pass"] == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert r["recommended_k"] == max(rows, key=lambda k: rows[k]["speedup"])
    assert all(row["speedup"] > 1 for row in rows.values())
    # With no acceptance, speculation only costs.
    r0 = planner.plan(planner.PlanInput(t, d, "bf16", device=planner.DEVICES["h100-80gb"], acceptance=0.0))
    assert r0["recommended_k"] == 0 and all(row["speedup"] < 1 for row in r0["speculative"])


def test_ngram_has_no_draft_cost():
    t = planner.shape_from_params(8e9)
    r = planner.plan(planner.PlanInput(t, planner.shape_from_params(1e9), "bf16", device=planner.DEVICES["h100-80gb"],
                                       acceptance=0.5, k_values=[2], proposer="ngram"))
    (row,) = r["speculative"]
    assert row["draft_pass_s"] == 0.0 and r["draft_bytes"] == 0.0
    assert row["speedup"] == pytest.approx(r["plain_itl_s"] / (row["verify_pass_s"] / 1.75))


def test_int4_counts_scales():
    assert planner.WEIGHT_BYTES["int4"] == pytest.approx(0.53125)


def run_cli(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["specdecode", "plan", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code or 0
    return code, capsys.readouterr()


def test_plan_cli_json_for_the_70b_example(monkeypatch, capsys):
    code, out = run_cli(monkeypatch, capsys, "--params", "70e9", "--dtype", "bf16", "--gpu", "h100-80gb", "--json")
    assert code == 0, out.err
    r = json.loads(out.out)
    assert r["weight_bytes"] == pytest.approx(140e9)
    assert r["fits_one_device"] is False
    assert r["min_tensor_parallel"] == 4 and r["num_gpus"] == 4 and r["fits"]
    assert r["assumptions"]


def test_plan_emits_serving_commands(monkeypatch, capsys):
    code, out = run_cli(monkeypatch, capsys, "--params", "8e9", "--draft-params", "1e9", "--emit", "vllm")
    assert code == 0 and out.out.startswith("vllm serve")
    spec = json.loads(out.out.split("--speculative-config ")[1].strip().strip("'"))
    assert spec["num_speculative_tokens"] >= 1 and spec["draft_tensor_parallel_size"] == 1
    code, out = run_cli(monkeypatch, capsys, "--params", "8e9", "--proposer", "ngram", "--emit", "sglang")
    assert "--speculative-algorithm NGRAM" in out.out


def test_plan_reads_acceptance_from_bench_results(monkeypatch, capsys, tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps([
        {"method": "draft", "category": "all", "k": 2, "acceptance_rate": 0.6, "tokens_per_s": 5.0},
        {"method": "draft", "category": "all", "k": 4, "acceptance_rate": 0.5, "tokens_per_s": 6.0},
        {"method": "draft", "category": "qa", "k": 4, "acceptance_rate": 0.1, "tokens_per_s": 9.0}]))
    code, out = run_cli(monkeypatch, capsys, "--params", "8e9", "--draft-params", "1e9", "--acceptance", str(results),
                        "--json")
    assert json.loads(out.out)["acceptance"] == 0.5


@pytest.mark.parametrize("args,message", [
    (["--params", "70e9", "--gpu", "tpu"], "unknown --gpu"),
    (["--params", "70e9", "--dtype", "int3"], "--dtype must be one of"),
    (["--params", "70e9", "--acceptance", "1.5"], "--acceptance must be in [0, 1]"),
    ([], "give the target"),
])
def test_plan_bad_input(monkeypatch, capsys, args, message):
    code, out = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and message in out.err
