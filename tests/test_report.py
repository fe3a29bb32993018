"""`specdecode report`: the speed checks read back from a bench run's runs.jsonl."""

import json

import pytest
from clirun import run_cli


def run(method, k, prompt, category, tokens, seconds, temperature=0.0):
    """A runs.jsonl line as `specdecode bench` writes it (bench/runner.run_record)."""
    return {"method": method, "backend": "llamacpp", "k": k, "prompt_id": prompt, "category": category,
            "subcategory": category, "turn": 0, "repeat": 0, "temperature": temperature, "prompt_tokens": 50,
            "new_tokens": tokens, "total_s": seconds, "tokens_per_s": tokens / seconds, "ttft_s": 0.5,
            "tpot_s": (seconds - 0.5) / (tokens - 1), "itl_s": [seconds / tokens] * tokens, "target_passes": tokens,
            "drafted_tokens": 0, "accepted_tokens": 0, "drafted_per_position": [], "accepted_per_position": [],
            "by_source": {}, "tree": {}, **engine_times(method, seconds),
            "peak_rss_bytes": 1, "cuda_peak_bytes": None, "token_ids": list(range(tokens))}


def write_runs(folder, runs):
    folder.mkdir(exist_ok=True)
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    return folder


def engine_times(method, seconds):
    """Our engine's methods book their stages; the peers' runs have none."""
    ours = method in ("plain", "ngram")
    return {name: (value if ours else None) for name, value in
            (("draft_s", 0.0), ("verify_s", seconds), ("prefill_s", 0.0))}


@pytest.fixture
def bench_dir(tmp_path):
    runs = []
    # Two code prompts and two chat prompts of different categories; llama-server is the fastest plain.
    for prompt, category in [("c1", "code_completion"), ("c2", "code_completion"), ("w", "writing"), ("m", "math")]:
        runs += [run("plain", None, prompt, category, 64, 8.0), run("llama-server", None, prompt, category, 64, 6.4)]
        code = category == "code_completion"
        runs += [run("ngram", 4, prompt, category, 64, 4.0 if code else 6.4),
                 run("ngram", 2, prompt, category, 64, 5.0 if code else 6.0),
                 run("ngram", "auto", prompt, category, 64, 4.0 if code else (6.4 if category == "math" else 8.0))]
    return write_runs(tmp_path / "b", runs)


def test_report_prices_every_method_against_the_fastest_plain_decoder(bench_dir, capsys, monkeypatch):
    out = run_cli(capsys, monkeypatch, "report", str(bench_dir), "--json")
    (check,) = out["checks"]
    assert check["fastest_plain"]["code"]["method"] == "llama-server"
    rows = {(m["method"], m["k"]): m for m in check["methods"]}
    assert rows["plain", "-"]["vs_fastest_plain"]["all"] == pytest.approx(0.8)
    assert rows["ngram", "4"]["vs_fastest_plain"]["code"] == pytest.approx(1.6)
    assert rows["ngram", "4"]["vs_fastest_plain"]["mix"] == pytest.approx(1.0)
    # k=auto lost on writing only: that is its worst category.
    assert rows["ngram", "auto"]["worst_category"] == {"category": "writing", "vs_fastest_plain": pytest.approx(0.8)}
    by_group = {a["group"]: a for a in check["auto_vs_fixed"]}
    assert by_group["code"]["best_fixed_k"] == "4" and by_group["code"]["ratio"] == pytest.approx(1.0)
    assert by_group["mix"]["best_fixed_k"] == "2"
    assert by_group["mix"]["ratio"] == pytest.approx((128 / 14.4) / (128 / 12.0))
    assert by_group["mix"]["median_prompt_ratio"] == pytest.approx(((6.0 / 8.0) + (6.0 / 6.4)) / 2)


def test_one_stalled_request_moves_the_pooled_ratio_not_the_median_per_prompt(tmp_path, capsys, monkeypatch):
    runs = []
    # Three prompts, the second with two turns; ours stalls on the third prompt only.
    for prompt, turn, ours in [("a", 0, 8.0), ("b", 0, 8.0), ("b", 1, 8.0), ("c", 0, 40.0)]:
        runs += [{**run("plain", None, prompt, "writing", 64, ours), "turn": turn},
                 {**run("llamacpp", None, prompt, "writing", 64, 6.4 if turn else 8.0), "turn": turn}]
    out = run_cli(capsys, monkeypatch, "report", str(write_runs(tmp_path / "s", runs)), "--json")
    (check,) = out["checks"]
    rows = {(m["method"], m["k"]): m for m in check["methods"]}
    assert check["fastest_plain"]["all"]["method"] == "llamacpp"
    pooled = rows["plain", "-"]["vs_fastest_plain"]["all"]
    assert pooled == pytest.approx((30.4) / 64.0)  # seconds: llama.cpp's 30.4 against ours 64
    # Per prompt (turns apart): 1.0, 1.0, 0.8, 0.2; their median, 0.9, is far from the pooled 0.475.
    assert rows["plain", "-"]["median_prompt_vs_fastest_plain"] == pytest.approx(0.9)
    assert rows["llamacpp", "-"]["median_prompt_vs_fastest_plain"] == pytest.approx(1.0)
    text = run_cli(capsys, monkeypatch, "report", str(tmp_path / "s"))["stdout"]
    assert "| plain | - | 4.00 | 0.48x | 0.90x | 0.48x | - | writing 0.48x |" in text


def test_report_prints_markdown_per_temperature(bench_dir, capsys, monkeypatch):
    runs = (bench_dir / "runs.jsonl").read_text().splitlines()
    hot = [json.dumps({**json.loads(line), "temperature": 1.0}) for line in runs]
    (bench_dir / "runs.jsonl").write_text("\n".join(runs + hot) + "\n")
    text = run_cli(capsys, monkeypatch, "report", str(bench_dir))["stdout"]
    assert "### T = 0" in text and "### T = 1" in text
    assert "| ngram | auto | " in text and "writing 0.80x" in text


def test_report_on_a_folder_without_runs_says_what_to_give(tmp_path, capsys, monkeypatch):
    out = run_cli(capsys, monkeypatch, "report", str(tmp_path), code=2)
    assert "runs.jsonl" in out["stderr"] and "specdecode bench" in out["stderr"]
    (tmp_path / "runs.jsonl").write_text("not json\n")
    assert "not JSON lines" in run_cli(capsys, monkeypatch, "report", str(tmp_path), code=2)["stderr"]
