"""SlotRunner (the runner whose passes are captured as CUDA graphs on a GPU), run here on the CPU
through the same code uncaptured: per-row positions, masks, rollback by position, rows joining and
leaving, growth; greedy float32 speculation equals plain; seeded sampling does not depend on the batch;
`--device` picks it and refuses what this machine cannot run."""

import json
import subprocess
import sys

import pytest
import torch

import tiny
from tiny import reference_logits
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.engine.request import Request
from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.models.backends.hf_slots import SlotRunner
from specdecode.models.device import resolve_device
from specdecode.models.registry import ModelError


def test_ragged_rows_rollback_and_growth_match_single_sequences():
    model = tiny.model(seed=3)
    runner = SlotRunner(model, slots=2, capacity=8)  # both grow inside the test
    prefix = [5, 6, 7, 8]
    runner.add_rows(prefix, 3)  # one prefill, copied into three slots
    assert runner.slots == 4
    feeds = [[1, 2, 3], [9], [4, 4]]
    logits = runner.forward(feeds)
    for b in range(3):
        torch.testing.assert_close(logits[b], reference_logits(model, prefix + feeds[b], len(feeds[b])),
                                   rtol=1e-4, atol=1e-4)
    runner.rollback([2, 0, 1])  # different numbers of drafts rejected per row
    kept = [[1], [9], [4]]
    more = [[10, 11], [12, 13, 14], [15]]
    logits = runner.forward(more)
    seqs = [prefix + kept[b] + more[b] for b in range(3)]
    for b in range(3):
        torch.testing.assert_close(logits[b], reference_logits(model, seqs[b], len(more[b])), rtol=1e-4, atol=1e-4)
    assert [runner.length(b) for b in range(3)] == [len(s) for s in seqs]
    long = list(range(20, 40))  # past the capacity of 8: the cache doubles, live rows copied
    last = runner.forward([long, [], [2]], last_only=True)
    assert runner.capacity >= len(seqs[0]) + len(long)
    assert [x.shape[0] for x in last] == [1, 0, 1]
    torch.testing.assert_close(last[0][0], reference_logits(model, seqs[0] + long, 1)[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(last[2][0], reference_logits(model, seqs[2] + [2], 1)[0], rtol=1e-4, atol=1e-4)


def test_stale_entries_after_a_rollback_are_never_seen():
    model = tiny.model(seed=4)
    runner = SlotRunner(model)
    runner.add_rows([5, 6, 7])
    runner.forward([[99, 98, 97, 96]])
    runner.rollback([4])  # the four entries stay in the cache, past the row's length
    after = runner.forward([[8]])[0]
    torch.testing.assert_close(after, reference_logits(model, [5, 6, 7, 8], 1), rtol=1e-4, atol=1e-4)
    # Control: the same position with the stale tokens kept gives other logits, so this can fail.
    assert not torch.allclose(reference_logits(model, [5, 6, 7, 99, 98, 97, 96, 8], 1), after, atol=1e-4)
    with pytest.raises(ValueError, match="cannot roll back"):
        runner.rollback([9])


def test_rows_join_and_leave_and_stay_packed():
    model = tiny.model()
    runner = SlotRunner(model, slots=1)
    seqs = {"a": [5, 6, 7, 8, 9, 10], "b": [3], "empty": []}
    runner.add_rows(seqs["a"])
    runner.add_rows(seqs["b"])
    runner.add_rows(seqs["empty"])  # a row with nothing yet: its first query sees itself, no NaN
    feeds = [[4], [7, 7, 7], [2]]
    out = runner.forward(feeds)
    assert all(torch.isfinite(x).all() for x in out)
    for name, feed in zip(seqs, feeds):
        seqs[name] = seqs[name] + feed
    runner.remove_rows([0])  # "a" leaves: "b" and "empty" move down a slot
    seqs.pop("a")
    runner.add_rows([11, 12])
    seqs["c"] = [11, 12]
    more = [[1, 2], [3], [4, 5, 6]]
    out = runner.forward(more)
    for (name, seq), feed, got in zip(seqs.items(), more, out):
        torch.testing.assert_close(got, reference_logits(model, seq + feed, len(feed)), rtol=1e-4, atol=1e-4,
                                   msg=name)
    runner.remove_rows([0, 1, 2])
    assert runner.rows == 0


def test_context_limit_and_capture_without_a_gpu_are_clear_errors():
    runner = SlotRunner(tiny.model(max_positions=16), capacity=8)
    runner.add_rows(list(range(15)))
    with pytest.raises(ValueError, match="context of 16"):
        runner.forward([[1, 2]])
    with pytest.raises(ValueError, match="CUDA device"):
        SlotRunner(tiny.model(), capture=True)


def test_greedy_speculation_on_slot_runners_equals_plain(tok):
    target, draft = tiny.model(seed=0), tiny.model(hidden=32, layers=1, seed=1)
    gen = SpeculativeGenerator.from_models(SlotRunner(target), tok, "draft", SlotRunner(draft), tok)
    plain = SpeculativeGenerator.from_models(target, tok, "none")
    assert gen.target.backend == "torch-slots" and gen.proposers["draft"].runner.backend == "torch-slots"
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for prompt in ("def f(x):", "abcabcabc"):
        for k in (1, 3, "auto"):
            assert gen.generate(prompt, params, k=k, chat=False).token_ids == \
                plain.generate(prompt, params, k=0, chat=False).token_ids, (prompt, k)
    # A batch whose rows join together and finish apart.
    batch = [Request(list(ids), SamplingParams(max_new_tokens=n, ignore_eos=True), k=3)
             for ids, n in (([5, 6, 7], 12), ([9, 9, 9, 9], 5), ([5, 6, 7], 20))]
    for req in batch:
        gen.submit(req)
    gen.run_until_idle()
    for req in batch:
        assert req.generated == plain.generate(req.prompt_ids, req.params, k=0, chat=False).token_ids


def test_seeded_sampling_is_the_same_alone_in_a_batch_and_on_another_runner(tok):
    target, draft = tiny.model(seed=0), tiny.model(hidden=32, layers=1, seed=1)
    gen = SpeculativeGenerator.from_models(SlotRunner(target), tok, "draft", SlotRunner(draft), tok)
    other = SpeculativeGenerator.from_models(BatchRunner(target), tok, "draft", BatchRunner(draft), tok)
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=11, ignore_eos=True)
    alone = gen.generate([5, 6, 7], params, k=3, chat=False).token_ids
    neighbours = [Request([9, 9, 9, 9], SamplingParams(temperature=1.0, max_new_tokens=n, seed=s, ignore_eos=True),
                          k=3) for n, s in ((7, 1), (30, 2))]
    mine = Request([5, 6, 7], params, k=3)
    for req in (neighbours[0], mine, neighbours[1]):
        gen.submit(req)
    gen.run_until_idle()
    assert mine.generated == alone
    assert other.generate([5, 6, 7], params, k=3, chat=False).token_ids == alone
    # Control: another seed gives other tokens, so the comparison can fail.
    assert gen.generate([5, 6, 7], SamplingParams(temperature=1.0, max_new_tokens=16, seed=12, ignore_eos=True),
                        k=3, chat=False).token_ids != alone


def test_device_names_resolve_or_are_refused_in_one_line():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ModelError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="no CUDA device here.*--device cpu"):
            resolve_device("cuda")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specdecode", *args], capture_output=True, text=True, timeout=300)


def test_cli_runs_slot_runners_and_refuses_a_missing_gpu(tiny_dirs):
    common = ("--dtype", "fp32", "--no-chat", "--max-new-tokens", "8", "--ignore-eos", "--json", "--k", "3")
    slots = cli("generate", "hello", "--target", "hf-slots:" + tiny_dirs["target"], "--draft",
                "hf-slots:" + tiny_dirs["draft"], "--proposer", "draft", "--device", "cpu", *common)
    assert slots.returncode == 0, slots.stderr
    plain = cli("generate", "hello", "--target", tiny_dirs["target"], "--proposer", "none", "--device", "cpu", *common)
    assert json.loads(slots.stdout)["token_ids"] == json.loads(plain.stdout)["token_ids"]
    if not torch.cuda.is_available():
        gpu = cli("generate", "hello", "--target", tiny_dirs["target"], "--proposer", "none", "--device", "cuda",
                  *common)
        assert gpu.returncode == 2 and gpu.stderr.startswith("error: --device cuda: no CUDA device here")
        assert "Traceback" not in gpu.stderr


def test_verify_passes_on_slot_runners_and_catches_the_naive_residual(tiny_dirs):
    args = ("verify", "hello", "--target", "hf-slots:" + tiny_dirs["target"], "--draft",
            "hf-slots:" + tiny_dirs["draft"], "--dtype", "fp32", "--proposer", "draft", "--samples", "600",
            "--length", "2", "--k", "3", "--device", "cpu", "--json")
    good = cli(*args, "--seed", "1")
    report = json.loads(good.stdout)
    assert good.returncode == 0 and report["passed"] and report["target_backend"] == "torch-slots", good.stderr
    naive = cli(*args, "--seed", "2", "--naive")
    assert naive.returncode == 1 and not json.loads(naive.stdout)["passed"]
