"""Benchmark arithmetic against hand-computed values, the results schema, and workload errors."""

import json
import re
import sys

import pytest

from specdecode import cli
from specdecode.bench import metrics
from specdecode.bench.runner import aggregate, complete_groups
from specdecode.policy.costs import iid_speedup
from specdecode.bench.workloads import WorkloadError, load_jsonl, load_workload, select


def test_itl_shares_a_step_evenly_between_its_tokens():
    # First step: 1 token at 0.5 s (TTFT). Second: 4 tokens by 0.9 s (0.1 each). Third: 1 token at 1.2 s.
    steps = [(0.5, 1), (0.9, 4), (1.2, 1)]
    assert metrics.ttft(steps) == 0.5
    assert metrics.itl_per_token(steps) == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.3])
    # A first step of 3 tokens: the two after the first share the TTFT.
    assert metrics.itl_per_token([(0.6, 3), (0.8, 2)]) == pytest.approx([0.2, 0.2, 0.1, 0.1])
    assert metrics.tpot(1.2, 0.5, 6) == pytest.approx(0.7 / 5)
    assert metrics.tpot(1.0, 1.0, 1) is None


def test_percentiles_and_leviathan():
    assert metrics.percentiles([1, 2, 3, 4, 5], [50]) == [3.0]
    assert metrics.percentiles([], [50, 90]) == [None, None]
    # a = 0.8, k = 4, c = 0.1: (1 - 0.8^5) / (0.2 * 1.4) = 0.67232 / 0.28
    assert iid_speedup(0.8, 4, 0.1) == pytest.approx(0.67232 / 0.28)
    assert iid_speedup(1.0, 3, 0.0) == 4.0
    assert metrics.expected_tokens_per_pass([0.9, 0.7, 0.4]) == pytest.approx(3.0)


def run(method, k, category, tokens, total, steps, drafted=None, accepted=None, dpp=(), app=(), draft_s=None,
        verify_s=None, prompt="p1", temperature=0.0, token_ids=None):
    return {"method": method, "backend": "torch", "k": k, "temperature": temperature, "category": category,
            "subcategory": category, "prompt_id": prompt, "turn": 0, "repeat": 0, "prompt_tokens": 10,
            "new_tokens": tokens, "total_s": total, "tokens_per_s": tokens / total, "ttft_s": metrics.ttft(steps),
            "tpot_s": metrics.tpot(total, metrics.ttft(steps), tokens), "itl_s": metrics.itl_per_token(steps),
            "target_passes": len(steps) if draft_s is not None else None, "drafted_tokens": drafted,
            "accepted_tokens": accepted, "drafted_per_position": list(dpp), "accepted_per_position": list(app),
            "draft_s": draft_s, "verify_s": verify_s, "prefill_s": 0.0 if draft_s is not None else None,
            "peak_rss_bytes": 1000, "cuda_peak_bytes": None, "token_ids": token_ids or list(range(tokens))}


def test_aggregate_by_hand():
    runs = [
        # plain: 4 tokens in 4 passes of 0.25 s
        run("plain", None, "code", 4, 1.0, [(0.25, 1), (0.5, 1), (0.75, 1), (1.0, 1)], 0, 0, draft_s=0.0,
            verify_s=1.0),
        # draft k=2: pass 1 accepts 2 (3 tokens), pass 2 accepts 0 (1 token); 4 tokens in 0.5 s
        run("draft", 2, "code", 4, 0.5, [(0.3, 3), (0.5, 1)], 4, 2, dpp=[2, 2], app=[1, 1], draft_s=0.1,
            verify_s=0.4, token_ids=[0, 1, 9, 3]),
        # k=auto: 2 then 1 drafts, drafting 0.15 s
        run("draft", "auto", "code", 4, 0.5, [(0.3, 3), (0.5, 1)], 3, 2, dpp=[2, 1], app=[1, 1], draft_s=0.15,
            verify_s=0.35),
    ]
    records = {(r["method"], r["k"], r["category"]): r for r in aggregate(runs)}
    auto = records[("draft", "auto", "code")]
    # c is reported under k=auto too: (0.15 s / 3 drafted) / 0.25 s = 0.2; no i.i.d. prediction without one k
    assert auto["draft_cost_ratio"] == pytest.approx(0.2) and auto["predicted_speedup"] is None
    records = {(m, c): r for (m, k, c), r in records.items() if k != "auto"}
    d = records[("draft", "code")]
    assert d["tokens_per_s"] == pytest.approx(8.0)
    assert d["speedup_vs_plain"] == pytest.approx(2.0)
    assert d["acceptance_rate"] == pytest.approx(0.5)
    assert d["mean_accepted_tokens"] == pytest.approx(2.0)
    assert d["per_position_acceptance"] == [0.5, 0.5]
    assert d["ttft_s"] == pytest.approx(0.3)
    # Decoding alone: 3 tokens after the first in 0.2 s, against plain's 3 in 0.75 s.
    assert d["decode_tokens_per_s"] == pytest.approx(15.0)
    assert d["decode_vs_fastest_plain"] == pytest.approx(15.0 / 4.0)
    assert d["itl_p50_s"] == pytest.approx(0.1)  # ITLs: 0.1, 0.1, 0.2
    # c = (0.1 s / 4 drafted) / (1.0 s / 4 plain passes) = 0.1
    assert d["draft_cost_ratio"] == pytest.approx(0.1)
    assert d["predicted_speedup"] == pytest.approx(iid_speedup(0.5, 2, 0.1))
    # v = (0.4 s / 2 passes) / 0.25 s = 0.8: priced as run, 1.75 tokens over 2 * 0.1 + 0.8 = 1.0
    assert d["verify_cost_ratio"] == pytest.approx(0.8)
    assert d["predicted_speedup_as_run"] == pytest.approx(1.75)
    assert d["greedy_differs_from_plain"] == 1 and d["greedy_first_difference_mean"] == 2
    assert ("draft", "all") in records and records[("plain", "all")]["speedup_vs_plain"] == 1.0


def test_speedups_are_over_the_fastest_plain_decoder_of_each_group():
    steps = [(0.1, 1), (0.2, 1)]
    runs = [run("plain", None, "code", 10, 1.0, steps), run("llamacpp", None, "code", 10, 0.5, steps),
            run("plain-torch", None, "code", 10, 4.0, steps), run("ngram", 4, "code", 10, 0.4, steps),
            run("plain", None, "qa", 10, 0.5, steps), run("llamacpp", None, "qa", 10, 1.0, steps),
            run("ngram", 4, "qa", 10, 0.6, steps)]
    records = {(r["method"], r["category"]): r for r in aggregate(runs)}
    # code: llama.cpp's own loop (20 tok/s) is the fastest plain decoder; qa: ours (20 tok/s).
    assert records[("ngram", "code")]["fastest_plain"] == "llamacpp"
    assert records[("ngram", "code")]["speedup_vs_fastest_plain"] == pytest.approx(25 / 20)
    assert records[("ngram", "code")]["speedup_vs_plain"] == pytest.approx(25 / 10)
    assert records[("ngram", "qa")]["fastest_plain"] == "plain"
    assert records[("ngram", "qa")]["speedup_vs_fastest_plain"] == pytest.approx(10 / 0.6 / 20)
    assert records[("plain-torch", "code")]["speedup_vs_fastest_plain"] == pytest.approx(2.5 / 20)
    # "all" pools both categories: plain 20 tokens in 1.5 s, llama.cpp 20 in 1.5 s (a tie, either is named).
    assert records[("ngram", "all")]["speedup_vs_fastest_plain"] == pytest.approx((20 / 1.0) / (20 / 1.5))


def test_bad_workload_files_name_the_line(tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text('{"turns": ["ok"]}\nnot json\n')
    with pytest.raises(WorkloadError, match="line 2: not valid JSON"):
        load_jsonl(f)
    f.write_text('{"turns": ["ok"]}\n{"category": "x"}\n')
    with pytest.raises(WorkloadError, match="line 2: missing field 'turns'"):
        load_jsonl(f)
    f.write_text('{"turns": []}\n')
    with pytest.raises(WorkloadError, match="line 1: 'turns' must be a non-empty list"):
        load_jsonl(f)
    f.write_text('[1, 2]\n')
    with pytest.raises(WorkloadError, match="line 1: expected a JSON object"):
        load_jsonl(f)
    with pytest.raises(WorkloadError, match="workload file not found"):
        load_jsonl(tmp_path / "missing.jsonl")


def test_spec_bench_selection_is_balanced():
    prompts = load_workload("spec-bench", limit=12)
    cats = [p.category for p in prompts]
    assert len(prompts) == 12 and all(cats.count(c) == 2 for c in set(cats)) and len(set(cats)) == 6
    coding = load_workload("spec-bench", categories=["coding"])
    assert len(coding) == 10 and {p.subcategory for p in coding} == {p.category for p in coding} == {"coding"}
    both = load_workload("spec-bench,code", categories=["coding", "code_completion"])
    assert len(both) == 34 and {p.category for p in both} == {"coding", "code_completion"}
    assert all("python" in p.turns[0].lower() for p in both if p.category == "code_completion")
    mt = select(load_workload("spec-bench", categories=["mt_bench"]), None, 8)
    assert len({p.subcategory for p in mt}) == 8
    with pytest.raises(WorkloadError, match="unknown categories"):
        load_workload("spec-bench", categories=["poetry"])


def test_bench_cli_writes_schema(monkeypatch, capsys, tiny_dirs, tmp_path):
    workload = tmp_path / "w.jsonl"
    workload.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [t, "Now shorter."]})
                                  for i, (c, t) in enumerate([("code", "def f(x): return x"), ("chat", "hi there"),
                                                              ("code", "for i in range(3):")])) + "\n")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", [
        "specdecode", "bench", "--workload", str(workload), "--target", tiny_dirs["target"], "--draft",
        f"{tiny_dirs['draft']},{tiny_dirs['target']}", "--dtype", "fp32", "--methods", "plain,draft,ngram,hf,hf-pld", "--k", "1,3",
        "--temperature", "0,1", "--max-new-tokens", "8", "--turns", "all", "--draft-context", "4", "--out", str(out)])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    records = json.loads((out / "results.json").read_text())
    required = {"method", "k", "temperature", "category", "tokens_per_s", "speedup_vs_fastest_plain", "speedup_vs_plain", "ttft_s", "itl_p50_s",
                "itl_p90_s", "itl_p99_s", "tpot_s", "acceptance_rate", "mean_accepted_tokens",
                "per_position_acceptance", "peak_rss_bytes"}
    for r in records:
        assert required <= set(r), required - set(r)
    methods = {(r["method"], r["k"]) for r in records}
    # A second draft is benched as its own method, named by its backend.
    assert methods == {("plain", None), ("hf", None), ("draft", 1), ("draft", 3), ("ngram", 1), ("ngram", 3),
                       ("hf-pld", 1), ("hf-pld", 3), ("draft-torch", 1), ("draft-torch", 3)}
    assert {r["category"] for r in records} == {"all", "code", "chat"}
    # Both drafts saw only the end of each prompt, and the report says so.
    assert {r["backend"] for r in records if r["method"].startswith("draft")} == {
        "torch + torch draft (last 4 prompt tokens)"}
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert {r["turn"] for r in runs} == {0, 1}  # both turns of the conversation measured
    report = (out / "report.md").read_text()
    assert "## Environment" in report and "## Category: code" in report
    assert (out / "speedup_vs_k.png").stat().st_size > 1000


def bench_code_prompts(monkeypatch, capsys, dirs, out, *args) -> dict:
    """`specdecode bench` on two code prompts with the tiny models; the "all" records by method."""
    monkeypatch.setattr(sys, "argv", [
        "specdecode", "bench", "--workload", "code", "--limit", "2", "--target", dirs["target"], "--draft",
        dirs["draft"], "--dtype", "fp32", *args, "--out", str(out)])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return {r["method"]: r for r in json.loads((out / "results.json").read_text()) if r["category"] == "all"}


def test_bench_compares_the_samplers_side_by_side(monkeypatch, capsys, tiny_dirs, tmp_path):
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, tmp_path / "out", "--methods", "plain,draft", "--k", "2",
                              "--temperature", "1", "--max-new-tokens", "6", "--sampler", "standard,invariant")
    assert set(rows) == {"plain", "draft", "plain-invariant", "draft-invariant"}


def test_a_peer_that_takes_a_fixed_k_is_reported_skipped_under_k_auto_alone(monkeypatch, capsys, tiny_dirs, tmp_path):
    """hf-pld drafts a fixed k: with --k auto alone it cannot run, and the bench says so rather than
    leaving it out without a word."""
    out = tmp_path / "out"
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, out, "--methods", "plain,ngram,hf-pld", "--k", "auto",
                              "--temperature", "0", "--max-new-tokens", "4")
    assert set(rows) == {"plain", "ngram"}
    assert "hf-pld`: it drafts a fixed k and --k gave only auto" in (out / "report.md").read_text()
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, tmp_path / "out2", "--methods", "plain,hf-pld", "--k",
                              "auto,2", "--temperature", "0", "--max-new-tokens", "4")
    assert set(rows) == {"plain", "hf-pld"} and rows["hf-pld"]["k"] == 2


def test_bench_compares_draft_context_windows_side_by_side(monkeypatch, capsys, tiny_dirs, tmp_path):
    """--draft-context 0,4 runs each draft-using method once per window in the same run: the later
    window as <method>-ctx4, its report naming the window, greedy output equal to plain's."""
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, tmp_path / "out", "--methods", "plain,draft,hybrid,ngram",
                              "--k", "2", "--temperature", "0", "--max-new-tokens", "6", "--draft-context", "0,4")
    assert set(rows) == {"plain", "draft", "hybrid", "ngram", "draft-ctx4", "hybrid-ctx4"}
    assert "last 4 prompt tokens" in rows["draft-ctx4"]["backend"]
    assert "prompt tokens" not in rows["draft"]["backend"]
    assert all(r["greedy_differs_from_plain"] == 0 for r in rows.values() if r["method"] != "plain")
    code = None
    monkeypatch.setattr(sys, "argv", ["specdecode", "bench", "--draft-context", "4,4", "--target", tiny_dirs["target"]])
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    assert code == 2 and "--draft-context lists a window twice" in capsys.readouterr().err


def test_bench_runs_trees_beside_the_chains_and_reports_them(monkeypatch, capsys, tiny_dirs, tmp_path):
    out = tmp_path / "out"
    # Keep every branch whatever this machine's measured costs say (the cost rule is tree.trim's).
    monkeypatch.setattr("specdecode.engine.drafting.trim", lambda parents, *_: list(range(len(parents))))
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, out, "--methods", "plain,ngram,suffix", "--k", "3",
                              "--temperature", "0", "--max-new-tokens", "24", "--tree", "0,12")
    assert set(rows) == {"plain", "ngram", "suffix", "ngram-tree12", "suffix-tree12"}
    assert rows["ngram"]["tree"] is None
    tree = rows["ngram-tree12"]["tree"]
    assert tree["passes"] > 0 and tree["nodes_per_pass"] > 1
    assert rows["ngram-tree12"]["greedy_differs_from_plain"] == 0
    assert "## Trees" in (out / "report.md").read_text()


def test_bench_defaults_to_our_default_beside_llama_cpp_s_plain_loops(monkeypatch, capsys, tiny_dirs, tmp_path):
    """Without --methods and --k a bench runs our default configuration (hybrid-suffix, k=auto) and the
    n-gram proposer beside our plain decoding and llama.cpp's plain loops; a peer that cannot run
    on these models (no GGUF for the tiny target) is named with its reason, not silently dropped."""
    out = tmp_path / "out"
    rows = bench_code_prompts(monkeypatch, capsys, tiny_dirs, out, "--limit", "1", "--max-new-tokens", "4")
    assert {(name, r["k"]) for name, r in rows.items()} == {("plain", None), ("hybrid-suffix", "auto"),
                                                                 ("ngram", "auto")}
    skipped = json.loads((out / "meta.json").read_text())["skipped"]
    assert set(skipped) == {"llamacpp", "llama-server"} and all("GGUF" in why for why in skipped.values())


def test_bench_rejects_bad_options(monkeypatch, capsys, tiny_dirs):
    for args, message in ((["--methods", "plain,magic"], "unknown methods"),
                          (["--k", "2,x"], "--k must be a whole number"),
                          (["--concurrency", "4"], "one request at a time"),
                          (["--workload", "/no/file.jsonl"], "workload file not found"),
                          (["--sampler", "gumbel"], "--sampler takes standard and/or invariant"),
                          (["--tree", "100"], "tree is the node budget per pass")):
        monkeypatch.setattr(sys, "argv", ["specdecode", "bench", "--target", tiny_dirs["target"], *args])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_auto_runs_learn_from_their_own_earlier_runs_only(twin_gen, monkeypatch):
    """In a bench the fixed-k runs of a prompt come before its k=auto run; auto must not start from
    the acceptance those runs learnt on this very prompt, but it keeps what its own earlier runs
    learnt, as a server running k=auto does (else a sweep of auto alone starts every request from
    the prior)."""
    from specdecode import SamplingParams
    from specdecode.bench.methods import EngineMethod

    monkeypatch.setattr(twin_gen, "pooled_acceptance", {})
    method = EngineMethod("ngram", twin_gen)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    method.run([5, 6, 7, 5, 6], params, 4)
    learnt = {name: t.conditional.copy() for name, t in twin_gen.pooled_acceptance.items()}
    assert learnt  # the fixed-k run taught the generator something
    seen = []
    real = twin_gen.generate
    monkeypatch.setattr(twin_gen, "generate", lambda *a, **kw: (
        seen.append({name: t.conditional.copy() for name, t in twin_gen.pooled_acceptance.items()}),
        real(*a, **kw))[1])
    method.run([5, 6, 7, 5, 6], params, "auto")
    method.run([8, 9, 8, 9, 8], params, "auto")
    method.run([8, 9, 8, 9, 8], params.replace(temperature=1.0, seed=0), "auto")
    assert seen[0] == {}  # the first auto run starts from nothing, not from the fixed-k run
    assert seen[1]  # what its own run learnt
    assert seen[2] == {}  # and each temperature learns on its own
    assert set(twin_gen.pooled_acceptance) == set(learnt)  # the generator's state is back as it was
    assert all((twin_gen.pooled_acceptance[n].conditional == c).all() for n, c in learnt.items())


def test_the_baselines_are_for_the_default_model(twin_gen, tok):
    from specdecode.bench.methods import make_method

    target = twin_gen.target.model
    for name in ("plain-torch", "llamacpp-shipped"):
        with pytest.raises(ValueError, match="another model"):
            make_method(name, twin_gen, "/some/checkpoint", target, tok, None)
    # Over a torch target, plain torch is our plain decoding itself (nothing else is loaded).
    method = make_method("plain-torch", twin_gen, "default", target, tok, None)
    assert method.name == "plain-torch" and method.proposer == "none" and method.gen is twin_gen


def test_an_interrupted_bench_reports_the_prompts_every_method_finished(monkeypatch, capsys, tiny_dirs, tmp_path):
    from specdecode.bench.methods import EngineMethod

    real, calls = EngineMethod.run, []

    def run(self, prompt_ids, params, k):
        calls.append(k)
        # Warm-up (2 points), prompt 1 (3 points), then stop in the middle of prompt 2.
        if len(calls) == 2 + 3 + 2:
            raise KeyboardInterrupt
        return real(self, prompt_ids, params, k)

    monkeypatch.setattr(EngineMethod, "run", run)
    out = tmp_path / "out"
    records = bench_code_prompts(monkeypatch, capsys, tiny_dirs, out, "--methods", "plain,ngram", "--k", "1,2",
                                 "--max-new-tokens", "4")
    streamed = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(streamed) == 3 and len({r["prompt_id"] for r in streamed}) == 1  # the finished prompt only
    assert records["plain"]["runs"] == 1
    assert json.loads((out / "meta.json").read_text())["config"]["interrupted"] is True


def test_complete_groups_keeps_prompts_that_every_point_ran():
    runs = [{"repeat": 0, "prompt_id": p, "temperature": 0, "turn": 0, "method": m} for p, m in
            [(1, "a"), (1, "b"), (2, "a")]]
    assert [r["prompt_id"] for r in complete_groups(runs, 2)] == [1, 1]


def test_peak_memory_sees_a_block_s_peak_and_starts_each_block_afresh():
    import numpy as np

    from specdecode.bench.methods import PeakMemory

    size = 400 * 2**20
    with PeakMemory() as big:
        buffer = np.ones(size, dtype=np.uint8)  # touched: resident
        del buffer
    with PeakMemory() as small:
        np.ones(2**20, dtype=np.uint8)
    # The 400 MB were resident inside the first block only; the second's peak starts from its own start.
    assert big.peak - small.peak > size // 2, (big.peak, small.peak)


def test_a_peer_server_is_left_to_go_idle_before_the_next_method():
    """LlamaServer.wait_idle returns once the server process stops using CPU (its threads poll for
    work after a request), not before; a process that never idles is given up on at the limit."""
    import subprocess
    import sys
    import time

    from specdecode.bench.llama_server import LlamaServer

    busy_then_idle = "import time\nt = time.time()\nwhile time.time() - t < 0.4: pass\ntime.sleep(30)"
    server = LlamaServer.__new__(LlamaServer)
    server.proc = subprocess.Popen([sys.executable, "-c", busy_then_idle])
    try:
        time.sleep(0.05)
        start = time.monotonic()
        server.wait_idle(limit_s=5.0)
        assert 0.25 < time.monotonic() - start < 2.0
        server.proc.kill()
        server.proc.wait()
        server.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        start = time.monotonic()
        server.wait_idle(limit_s=0.5)  # the control: it never idles
        assert 0.45 < time.monotonic() - start < 1.5
    finally:
        server.proc.kill()
        server.proc.wait()


def test_the_shipped_repetitive_workload_is_what_its_generator_makes():
    """The data file is reproducible: regenerating it gives the same bytes, and the schema file shipped
    beside it has exactly the keys every extraction prompt asks for."""
    from importlib import resources

    from specdecode.bench import repetitive_workload

    data = resources.files("specdecode") / "data"
    assert (data / "repetitive.jsonl").read_text(encoding="utf-8") == repetitive_workload.jsonl()
    schema = json.loads((data / "contact.schema.json").read_text())
    keys = re.findall(r'"(\w+)":', repetitive_workload.SCHEMA)
    assert sorted(schema["properties"]) == sorted(keys) == sorted(schema["required"])
    extractions = [r for r in repetitive_workload.rows() if r["category"] == "extraction"]
    assert len(extractions) == 40 and all(repetitive_workload.SCHEMA in r["turns"][0] for r in extractions)


def test_a_system_prompt_goes_before_every_prompt(monkeypatch, capsys, tiny_dirs, tmp_path):
    """--system-prompt-file: the offline bench's prompts carry it (as many more tokens as the system
    turn takes in the chat template); the config records it."""
    system = tmp_path / "system.txt"
    system.write_text("You are a terse assistant. Answer in one line.\n")
    args = ("--methods", "plain", "--max-new-tokens", "4")
    without = bench_code_prompts(monkeypatch, capsys, tiny_dirs, tmp_path / "a", *args)["plain"]
    with_system = bench_code_prompts(monkeypatch, capsys, tiny_dirs, tmp_path / "b", *args,
                                     "--system-prompt-file", str(system))["plain"]
    from tiny import tokenizer

    turn = tokenizer().apply_chat_template([{"role": "system", "content": system.read_text().strip()}], tokenize=False)
    assert with_system["prompt_tokens_mean"] - without["prompt_tokens_mean"] == len(tokenizer()(turn)["input_ids"])
    runs = [json.loads(line) for line in (tmp_path / "b" / "runs.jsonl").read_text().splitlines()]
    assert runs and all(r["prompt_tokens"] > 0 for r in runs)
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert meta["config"]["system_prompt"] == system.read_text().strip()


@pytest.mark.parametrize("content,args,message", [
    ("", (), "is empty: give a file with the system message"),
    ("Be brief.", ("--endpoint", "http://127.0.0.1:1", "--api", "completions"), "needs --api chat"),
])
def test_bad_system_prompts_are_refused(capsys, monkeypatch, tmp_path, content, args, message):
    from clirun import run_cli

    path = tmp_path / "s.txt"
    path.write_text(content)
    said = run_cli(capsys, monkeypatch, "bench", "--system-prompt-file", str(path), *args, code=2)["stderr"]
    assert message in said
    missing = run_cli(capsys, monkeypatch, "bench", "--system-prompt-file", str(tmp_path / "none.txt"), code=2)
    assert "cannot be read as UTF-8 text" in missing["stderr"]
