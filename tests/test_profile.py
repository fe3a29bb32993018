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
