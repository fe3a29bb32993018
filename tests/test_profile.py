"""`specdecode profile`: the engine's own per-stage clocks, added up per pass and per token."""

from clirun import run_cli

from specdecode import SamplingParams
from specdecode.bench.profile import STAGES, stage_profile


def test_every_pass_records_its_stages(twin_gen):
    out = twin_gen.generate([5, 6, 7, 8], SamplingParams(max_new_tokens=12, ignore_eos=True), k=3, chat=False)
    stages = out.stats["stage_s"]
    assert set(stages) == {"plan", "propose", "score", "verify", "learn"}
    assert all(s >= 0 for s in stages.values())
    # The stages are parts of the request's wall time, never more than it.
    assert sum(stages.values()) <= out.stats["total_s"] - out.stats["prefill_s"] + 1e-6
    # draft_s and verify_s are the same clock's plan + propose and score + verify.
    assert abs(out.stats["draft_s"] - stages["plan"] - stages["propose"]) < 1e-6
    assert abs(out.stats["verify_s"] - stages["score"] - stages["verify"]) < 1e-6


def test_profile_adds_up_to_the_decode_time(twin_gen):
    report = stage_profile(twin_gen, ["a b c a b c", "x y z"], SamplingParams(max_new_tokens=10, ignore_eos=True), 3,
                           "draft", chat=False)
    assert report["passes"] > 0 and report["tokens"] == 20
    assert set(report["ms_per_pass"]) == set(STAGES)
    # The twin draft is accepted whole: more than one token a pass.
    assert report["tokens_per_pass"] > 1.5
    per_pass = sum(report["ms_per_pass"].values())
    per_token = sum(report["ms_per_token"].values())
    assert abs(per_pass / report["tokens_per_pass"] - per_token) < 1e-6 * max(per_pass, 1)
    assert report["machine"]["cores"] >= 1


def test_profile_command(capsys, monkeypatch, tiny_dirs, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "x", "turns": ["hello there"]}\n')
    report = run_cli(capsys, monkeypatch, "profile", "--target", tiny_dirs["target"], "--draft", tiny_dirs["draft"],
                     "--dtype", "fp32", "--proposer", "draft", "--k", "2", "--workload", str(prompts), "--limit", "1",
                     "--max-new-tokens", "8", "--json")
    assert report["tokens"] == 8 and report["proposer"] == "draft" and report["k"] == 2
    assert report["ms_per_pass"]["score"] > 0
    refused = run_cli(capsys, monkeypatch, "profile", "--target", tiny_dirs["target"], "--k", "x", code=2)
    assert "--k" in refused["stderr"]


def test_curve_command_times_every_width_and_a_tree_where_the_runner_scores_trees(capsys, monkeypatch, tiny_dirs):
    report = run_cli(capsys, monkeypatch, "profile", "curve", tiny_dirs["target"], "--widths", "1,3,5", "--rounds", "2",
                     "--context", "20", "--dtype", "fp32", "--json")
    found = report["curves"][tiny_dirs["target"]]
    assert set(found["chain_ms"]) == {"1", "3", "5"} and all(ms > 0 for ms in found["chain_ms"].values())
    # The transformers runner scores trees (tree attention); a one-token pass has no tree.
    assert set(found["tree_ms"]) == {"3", "5"} and all(ms > 0 for ms in found["tree_ms"].values())
    assert report["context"] == 20 and report["machine"]["cores"] >= 1
    refused = run_cli(capsys, monkeypatch, "profile", "curve", tiny_dirs["target"], "--widths", "0,2", code=2)
    assert "--widths" in refused["stderr"]


def test_draft_cost_command_prices_each_draft_against_the_target(capsys, monkeypatch, tiny_dirs):
    report = run_cli(capsys, monkeypatch, "profile", "draft-cost", tiny_dirs["draft"], tiny_dirs["target"],
                     "--target", tiny_dirs["target"], "--dtype", "fp32", "--json")
    assert set(report["table"]) == {tiny_dirs["draft"], tiny_dirs["target"]}
    twin = report["table"][tiny_dirs["target"]]
    # The target drafting for itself agrees at every position; a different model does not.
    assert twin["greedy"] == 1.0 and report["table"][tiny_dirs["draft"]]["greedy"] < 1.0
    assert all(row["draft_ms"] > 0 for row in report["table"].values()) and report["verify_ms"]["1"] > 0
    refused = run_cli(capsys, monkeypatch, "profile", "draft-cost", tiny_dirs["bigvocab"], "--target",
                      tiny_dirs["target"], code=2)
    assert "vocab" in refused["stderr"]


def test_threads_command_runs_each_arrangement_in_its_own_process(capsys, monkeypatch, tiny_dirs):
    report = run_cli(capsys, monkeypatch, "profile", "threads", "--target", tiny_dirs["target"], "--draft",
                     tiny_dirs["draft"], "--dtype", "fp32", "--rounds", "1", "--max-new-tokens", "6",
                     "--arrangements", "default,torch-1-thread", "--json")
    assert set(report["summary"]) == {"default", "torch-1-thread"}
    assert all(len(rows) == 2 and rows[0]["target_passes"] >= 1 for rows in report["runs"].values())
    assert all(row["decode_tokens_per_s"] > 0 for row in report["summary"].values())
    refused = run_cli(capsys, monkeypatch, "profile", "threads", "--arrangements", "spinning", code=2)
    assert "spinning" in refused["stderr"]
