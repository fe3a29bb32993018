"""The llama.cpp backend (extra `llamacpp`) on the bundled GGUF files: the runner keeps the
Runner contract (logits of a block = logits one by one; rollback by position), it pairs with a
torch target as the draft, and the bench's llama.cpp peers run.

`make test` installs the extra, so these run there; without llama-cpp-python only the test of the
error message runs.
"""

import json
import sys

import pytest
import torch

from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.backends import llamacpp
from specdecode.models.registry import ModelError

needs_llamacpp = pytest.mark.skipif(not llamacpp.available(), reason="llama-cpp-python is not installed")
PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def test_missing_extra_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(llamacpp, "available", lambda: False)
    with pytest.raises(ModelError, match=r"pip install 'specdecode\[llamacpp\]'"):
        llamacpp.load_llama("whatever.gguf")


@pytest.fixture(scope="module")
def draft_runner():
    from specdecode.models.registry import resolve

    return llamacpp.LlamaCppRunner.load(resolve("default", "draft").gguf, n_ctx=1024, max_rows=4)


def logits_of(runner, prefix: list[int], tokens: list[int]) -> torch.Tensor:
    """Logits of `tokens` after `prefix`, on a scratch row that leaves again."""
    runner.add_rows(prefix)
    try:
        return runner.forward([tokens])[0]
    finally:
        runner.remove_rows([runner.rows - 1])


@needs_llamacpp
@pytest.mark.realmodel
def test_several_rows_get_every_position_and_long_prompts_one_call():
    """The runner's context is sized for itself: many rows (verify runs hundreds of sequences), logits
    at every position of each, prompts in 512-token calls. It once inherited the 64-token batch and
    one output per sequence of the tiny context llama-cpp-python opened, and llama.cpp aborted the
    process when a runner held more than 64 rows (GGML_ASSERT n_outputs_max): run in a child so that
    an abort fails this test only."""
    import subprocess

    code = """
import torch
from specdecode.models.backends import llamacpp
from specdecode.models.registry import resolve
r = llamacpp.LlamaCppRunner.load(resolve("default", "draft").gguf, n_ctx=512, max_rows=80)
r.add_rows(list(range(1000, 1300)), 3)  # a 300-token prompt, one decode call, copied to 3 rows
out = r.forward([list(range(2000 + 6 * b, 2006 + 6 * b)) for b in range(3)])
assert [tuple(o.shape) for o in out] == [(6, r.vocab_size)] * 3 and all(torch.isfinite(o).all() for o in out)
print("ok", r.lengths)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok [306, 306, 306]" in run.stdout, run.stderr[-2000:]


@needs_llamacpp
@pytest.mark.realmodel
def test_torch_matmuls_between_passes_leave_llama_cpp_running_and_exact():
    """Where the llama.cpp build has AMX kernels, a torch bf16 matmul (oneDNN releases the AMX
    tiles on its threads) between two passes of a Q4_0 model once stopped the process with an
    illegal instruction: llama.cpp loads the tile configuration once per thread. Its passes now run
    on a thread of their own. In a child, so that a fault fails this test only; on a build without
    AMX the passes run where they are called and the same check holds."""
    import subprocess

    code = """
import torch
from specdecode.models.backends import ggml_thread, llamacpp
from specdecode.models.registry import resolve
r = llamacpp.LlamaCppRunner.load(llamacpp.requantized(resolve("default", "draft").gguf, "q4_0"), n_ctx=512)
prompt, block = list(range(1000, 1040)), list(range(2000, 2008))
r.add_rows(prompt)
before = r.forward([block])[0]
r.rollback([len(block)])
a = torch.randn(64, 896, dtype=torch.bfloat16)
for _ in range(3):
    a = torch.nn.functional.linear(a, torch.randn(896, 896, dtype=torch.bfloat16)).clamp(-1, 1)
after = r.forward([block])[0]
assert torch.equal(before, after), (before - after).abs().max()
print("ok", ggml_thread.has_amx())
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_llama_cpp_calls_run_on_their_own_thread_where_the_build_needs_it(monkeypatch):
    """With AMX in the build: on one dedicated thread, results and exceptions as if called here,
    and a call made from that thread runs in place (no deadlock); without: where called."""
    import threading

    from specdecode.models.backends import ggml_thread

    def where(fail=False):
        if fail:
            raise ValueError("from llama.cpp's thread")
        return threading.current_thread().name

    monkeypatch.setattr(ggml_thread, "has_amx", lambda: False)
    assert ggml_thread.run(where) == threading.current_thread().name
    monkeypatch.setattr(ggml_thread, "has_amx", lambda: True)
    names = {ggml_thread.run(where) for _ in range(3)}
    assert len(names) == 1 and names.pop().startswith(ggml_thread.NAME)
    assert ggml_thread.run(ggml_thread.run, where).startswith(ggml_thread.NAME)
    with pytest.raises(ValueError, match="from llama.cpp's thread"):
        ggml_thread.run(where, fail=True)


@needs_llamacpp
@pytest.mark.realmodel
def test_block_logits_equal_one_by_one_and_rollback_restores(draft_runner):
    r = draft_runner
    ids = list(range(1000, 1012))
    block = logits_of(r, [], ids)
    assert block.shape == (12, r.vocab_size) and block.dtype == torch.float32
    r.add_rows(ids[:4])
    singles = torch.stack([r.forward([[t]])[0][0] for t in ids[4:]])
    assert r.length(0) == 12
    # llama.cpp's batched and single-token kernels round differently: close, not equal (arbitrary
    # ids make near-ties, so the argmax may flip on a few positions).
    assert (singles - block[4:]).abs().max() < 0.5
    assert (singles.argmax(-1) == block[4:].argmax(-1)).float().mean() >= 0.75
    # Rolling back 5 positions and feeding other tokens gives what a cache that never saw them gives.
    r.rollback([5])
    assert r.length(0) == 7
    after_rollback = r.forward([[5, 6, 7]])[0]
    r.remove_rows([0])
    fresh = logits_of(r, ids[:7], [5, 6, 7])
    assert torch.equal(after_rollback.argmax(-1), fresh.argmax(-1))
    rounding = (after_rollback - fresh).abs().max()
    # Control: the same tokens after the 5 rejected ones (no rollback) give quite other logits.
    assert (logits_of(r, ids, [5, 6, 7]) - fresh).abs().max() > 5 * rounding
    assert r.rows == 0


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest total variation distance between the distributions of matching positions."""
    return float(0.5 * (a.float().softmax(-1) - b.float().softmax(-1)).abs().sum(-1).max())


# How far a row's distributions may move with the pass it is computed in (which rows share it, how
# its context was cut into passes): llama.cpp sums in another order then, more so with flash
# attention's blocks over a cache that other rows' cells interleave. Measured up to 0.021 with
# either attention on this test's tokens; a row reading another's cache moves them far more (the
# control below).
ROW_ROUNDING_TV = 0.05


@needs_llamacpp
@pytest.mark.realmodel
def test_rows_are_sequences_of_one_context(draft_runner):
    """Rows sharing a prompt are prefilled once and copied; each row then goes its own way, and a
    row's logits do not depend on the rows beside it (beyond the summation order)."""
    r = draft_runner
    prefix = list(range(2000, 2010))
    r.add_rows(prefix, 3)
    feeds = [[1, 2, 3], [4], [5, 6]]
    together = r.forward(feeds)
    r.rollback([1, 0, 2])
    assert [r.length(b) for b in range(3)] == [12, 11, 10]
    r.remove_rows([1])  # the middle row leaves; the others keep their caches
    more = r.forward([[9], [8, 7]])
    r.remove_rows([0, 1])
    for b, feed in enumerate(feeds):
        assert total_variation(logits_of(r, prefix, feed), together[b]) < ROW_ROUNDING_TV, b
    assert total_variation(more[0], logits_of(r, prefix + [1, 2], [9])) < ROW_ROUNDING_TV
    assert total_variation(more[1], logits_of(r, prefix, [8, 7])) < ROW_ROUNDING_TV
    # The control: the same token after another row's context is far outside that bound.
    assert total_variation(more[0], logits_of(r, prefix + [5, 6], [9])) > 4 * ROW_ROUNDING_TV
    with pytest.raises(ValueError, match="at most 4 rows"):
        r.add_rows(prefix, 5)


@needs_llamacpp
@pytest.mark.realmodel
def test_requantised_draft_is_smaller_and_still_agrees(draft_runner):
    """llamacpp:default@q4_0: requantised once by llama.cpp (cached), fewer bytes per token."""
    from specdecode.models.loader import load

    runner, _ = load("llamacpp:default@q4_0", "draft", "float32", max_rows=1)
    assert runner.gguf.name.endswith("@q4_0.gguf")
    assert runner.gguf.stat().st_size < draft_runner.gguf.stat().st_size
    from gguf import GGUFReader

    types = {t.name: t.tensor_type.name for t in GGUFReader(str(runner.gguf)).tensors}
    # The layers' matrices go to Q4_0 (mostly Q5_0 before); llama.cpp keeps the output projection at Q8_0.
    assert types["blk.0.attn_q.weight"] == "Q4_0" and types["output.weight"] == "Q8_0"
    ids = list(range(1000, 1012))
    a, b = logits_of(runner, [], ids), logits_of(draft_runner, [], ids)
    # Same model at another precision: mostly the same top token.
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.5


@needs_llamacpp
@pytest.mark.realmodel
def test_llamacpp_draft_for_a_torch_target_is_exact_greedy():
    """Greedy speculative decoding with the llama.cpp draft emits the target's own greedy tokens. The
    target is the 0.5B's checkpoint on torch (a third of the 1.5B's load), its draft the same model's
    GGUF on llama.cpp: any torch target with any llama.cpp draft runs the same code."""
    from specdecode.models.registry import resolve

    gen = SpeculativeGenerator.from_pretrained(target=str(resolve("default", "draft").path), draft="llamacpp:default",
                                               proposer="draft", dtype="float32")
    assert type(gen.proposers["draft"].runner).__name__ == "LlamaCppRunner"
    params = SamplingParams(max_new_tokens=24)
    spec = gen.generate(PROMPT, params, k=4, proposer="draft")
    plain = gen.generate(PROMPT, params, k=0, proposer="none")
    assert spec.token_ids == plain.token_ids
    assert spec.stats["acceptance_rate"] > 0.3  # the same family of models agrees on such a prompt


@needs_llamacpp
@pytest.mark.realmodel
def test_llamacpp_target_and_draft_batch_like_one_request():
    """Both models on llama.cpp, several requests at once: each row gets the tokens it gets alone
    (greedy; the target's batched kernels may round a near-tie otherwise, hence short outputs)."""
    from specdecode.engine.request import Request

    gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default", draft="llamacpp:default@q4_0",
                                               proposer="hybrid")
    params = SamplingParams(max_new_tokens=12)
    prompts = [PROMPT, "Write a Python function that reverses a list.", PROMPT]
    reqs = [Request(gen.encode(p), params, k=k, proposer=name)
            for p, k, name in zip(prompts, (3, "auto", 2), ("hybrid", "draft", "ngram"))]
    for req in reqs:
        gen.submit(req)
    gen.run_until_idle()
    for req in reqs:
        alone = gen.generate(req.prompt_ids, params, k=0, chat=False, proposer="none")
        assert req.finish_reason == "length" and req.generated == alone.token_ids
    assert gen.target.rows == 0 and gen.proposers["draft"].runner.rows == 0


@needs_llamacpp
@pytest.mark.realmodel
def test_tree_drafting_over_a_llamacpp_target_emits_its_greedy_tokens():
    """Trees scored by the llama.cpp target, from the draft model's second choices and the lookup's
    other matches, every branch kept whatever the costs say: the target's own greedy tokens (short:
    its batched kernels may round a near-tie otherwise)."""
    from specdecode.policy.knobs import TreeKnobs

    gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft="llamacpp:default@q4_0",
                                               proposer="hybrid")
    params = SamplingParams(max_new_tokens=16)
    plain = gen.generate(PROMPT, params, k=0, proposer="none").token_ids
    with gen.configured(cost_rule=False, tree=TreeKnobs(branch_above=0.0)):
        for name in ("draft", "hybrid"):
            out = gen.generate(PROMPT, params, k=4, proposer=name, tree=8)
            assert out.token_ids == plain, name
            assert out.stats["tree"]["passes"] > 0, name
    assert gen.target.rows == 0 and len(gen.target._spare) == gen.target.tree_seqs


@needs_llamacpp
@pytest.mark.realmodel
def test_bench_lists_llamacpp_peers_and_backends(monkeypatch, capsys, tmp_path):
    """A 600-token prompt: longer than llama.cpp's batch of 512, where the prompt-lookup peer once
    overflowed its logits array. The bundled 0.5B model as the target: what is tested is the
    peers and the batch, and its prompts cost a third of the 1.5B's."""
    from specdecode import cli
    from specdecode.models.registry import DEFAULT_DRAFT

    monkeypatch.setattr(sys, "argv", [
        "specdecode", "bench", "--target", f"llamacpp:{DEFAULT_DRAFT}", "--methods", "plain,ngram,llamacpp,llamacpp-pld,hf",
        "--k", "3", "--prompt-lengths", "600", "--max-new-tokens", "12", "--out", str(tmp_path)])
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    records = json.loads((tmp_path / "results.json").read_text())
    rows = {r["method"]: r for r in records if r["category"] == "all"}
    assert {"plain", "ngram", "llamacpp", "llamacpp-pld"} <= set(rows)
    assert rows["plain"]["backend"] == "llamacpp" and rows["llamacpp-pld"]["backend"] == "llamacpp"
    assert all(r["output_tokens_mean"] > 0 and r["tokens_per_s"] > 0 for r in rows.values())
    assert rows["ngram"]["speedup_vs_llamacpp"] is not None
    assert "hf" not in rows and "transformers" in capsys.readouterr().err  # skipped, with the reason


def test_a_tree_row_numbers_its_branches_and_knows_its_paths():
    tree = llamacpp.TreeRow.of(0, 10, [9, 10, 11, 12, 13], [-1, 0, 0, 2, 2])
    assert tree.depth == [0, 1, 1, 2, 2] and tree.leaves == [1, 3, 4]
    # Every branch through a node, one of its own descendants' first: the id it attends with.
    assert tree.through == [[0, 1, 2], [0], [1, 2], [1], [2]]
    tree.check_path([0, 2, 4])
    for bad in ([2, 4], [0, 1, 3], [0, 5]):
        with pytest.raises(ValueError, match="not a path"):
            tree.check_path(bad)
    with pytest.raises(ValueError, match="earlier token or -1"):
        llamacpp.TreeRow.of(0, 0, [1, 2], [-1, 1])


@needs_llamacpp
@pytest.mark.realmodel
def test_a_tree_pass_scores_each_path_as_its_own_chain(draft_runner):
    """A branch per sequence id: each node's logits are its path's fed as a chain (beside a row of
    another width, after a rollback), and after prune the row goes on from the kept path, with the
    lent ids back."""
    r = draft_runner
    prefix = list(range(4000, 4010))
    spare = len(r._spare)
    r.add_rows(prefix, 2)
    r.forward([[6, 7], [6]])
    r.rollback([1, 0])
    out = r.forward([[9, 10, 11, 12, 14], [9, 13]], parents=[[-1, 0, 0, 2, 0], [-1, 0]])
    assert len(r._spare) == spare - 2  # row 0's tree has three leaves: two ids lent
    with pytest.raises(RuntimeError, match="prune"):
        r.forward([[1], [1]])
    r.prune([[0, 2, 3], [0]])
    assert [r.length(0), r.length(1)] == [14, 12] and len(r._spare) == spare
    after = r.forward([[20], [21]])
    r.remove_rows([0, 1])
    base = prefix + [6]

    def close(got, want):
        # llama.cpp's logits move a little with how the context was split into passes (a plain chain
        # too), so the argmax is compared only where the reference's top two are further apart than
        # twice that movement: a near tie may flip, a clear winner may not.
        moved = (got - want).abs().max()
        assert moved < 0.5
        top = want.topk(2, -1).values
        clear = top[:, 0] - top[:, 1] > 2 * moved
        assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear])

    close(out[0][[0, 2, 3]], logits_of(r, base, [9, 11, 12]))
    close(out[0][[0, 1]], logits_of(r, base, [9, 10]))
    close(out[0][[0, 4]], logits_of(r, base, [9, 14]))
    close(out[1], logits_of(r, base, [9, 13]))
    close(after[0], logits_of(r, base + [9, 11, 12], [20]))
    close(after[1], logits_of(r, base + [9], [21]))
    # Control: a node read as if its sibling came before it (the chain [9, 10, 12]) is far off.
    assert (out[0][3] - logits_of(r, base, [9, 10, 12])[2]).abs().max() > 1.0
    assert r.rows == 0


@needs_llamacpp
@pytest.mark.realmodel
def test_a_tree_wider_than_the_spare_ids_is_refused(draft_runner):
    r = draft_runner
    r.add_rows([1, 2, 3])
    wide = len(r._spare) + 2  # leaves under one root: one on the row's own id, the rest lent
    with pytest.raises(ValueError, match="fewer branches"):
        r.forward([[5] * (wide + 1)], parents=[[-1] + [0] * wide])
    assert r.length(0) == 3
    r.forward([[5, 6]], parents=[[-1, 0]])  # nothing was left half done
    r.prune([[0, 1]])
    assert r.length(0) == 5
    # A tree pass not pruned rolls back whole (as the cost curves time it), never in part.
    spare = len(r._spare)
    r.forward([[7, 8, 9]], parents=[[-1, 0, 0]])
    with pytest.raises(ValueError, match="prune"):
        r.rollback([1])
    r.rollback([4])
    assert r.length(0) == 4 and len(r._spare) == spare
    got = r.forward([[6]])[0]
    r.remove_rows([0])
    assert (got - logits_of(r, [1, 2, 3, 5], [6])).abs().max() < 0.5


@needs_llamacpp
@pytest.mark.realmodel
def test_a_prompt_fed_with_the_first_drafts_scores_like_a_prefill_then_a_pass(draft_runner):
    """forward(..., unscored=n): the first n tokens enter the cache without logits, the rest score as
    they would after a prefill of those n (llama.cpp's batched kernels: close, not bitwise)."""
    r = draft_runner
    prefix, tokens = list(range(3000, 3020)), [11, 12, 13]
    r.add_rows([])
    fused = r.forward([prefix + tokens], unscored=[len(prefix)])[0]
    assert fused.shape == (len(tokens), r.vocab_size) and r.length(0) == len(prefix) + len(tokens)
    r.remove_rows([0])
    apart = logits_of(r, prefix, tokens)
    assert (fused - apart).abs().max() < 0.5 and torch.equal(fused.argmax(-1), apart.argmax(-1))
    # Control: without `unscored` every fed position comes back.
    r.add_rows([])
    assert r.forward([prefix + tokens])[0].shape == (len(prefix) + len(tokens), r.vocab_size)
    r.remove_rows([0])


@needs_llamacpp
@pytest.mark.realmodel
def test_a_lone_request_is_prefilled_within_its_first_pass(monkeypatch):
    """On the llama.cpp target a request alone in the batch goes in with its first pass (one
    llama_decode for prompt and first token, not two), emits what the two-pass path emits, and that
    pass is booked as prefill, not as a pass the cost curve learns from. A request that joins a
    running batch is still prefilled on its own (a failed prefill ends only that request)."""
    from specdecode.engine.request import Request

    gen = SpeculativeGenerator.from_pretrained(target="llamacpp:default@q4_0", draft=None, proposer="ngram")
    target = gen.target
    calls: list[tuple[int, list[int] | None]] = []
    decode = target._decode
    monkeypatch.setattr(target, "_decode", lambda feeds, last_only, unscored=None: (
        calls.append((sum(len(f) for _, f in feeds), unscored)), decode(feeds, last_only, unscored))[1])
    params = SamplingParams(max_new_tokens=12)
    ids = gen.encode(PROMPT)
    one = gen.generate(ids, SamplingParams(max_new_tokens=1), k=0, chat=False, proposer="none")
    assert calls == [(len(ids), [len(ids) - 1])]
    assert one.stats["prefill_s"] > 0 and one.stats["verify_s"] == 0 and not gen.pass_costs.verify.points
    fused = gen.generate(ids, params, k=3, chat=False)
    with monkeypatch.context() as m:
        m.setattr(type(target), "prefills_in_pass", False)
        calls.clear()
        apart = gen.generate(ids, params, k=3, chat=False)
        assert calls[0] == (len(ids) - 1, None)  # the control: a prefill pass of its own
    assert fused.token_ids == apart.token_ids
    # A second request joining a running one: its prompt goes in alone, before the batched pass.
    first = Request(ids, params, k=0, proposer="none")
    gen.submit(first)
    gen.step()
    calls.clear()
    late = Request(gen.encode("Write a Python function that reverses a list."), params, k=0, proposer="none")
    gen.submit(late)
    gen.step()
    assert calls[0] == (len(late.prompt_ids) - 1, None) and all(u is None for _, u in calls)
    gen.run_until_idle()
    assert first.generated == gen.generate(ids, params, k=0, chat=False, proposer="none").token_ids
    assert late.finish_reason == "length" and len(late.generated) == 12


@needs_llamacpp
@pytest.mark.realmodel
@pytest.mark.parametrize("setting", ["1", "0"])
def test_a_loaded_runner_keeps_its_weights_on_huge_pages(setting):
    """The weights llama.cpp copies out of the GGUF go onto 2 MB pages where the kernel allows it
    (huge_pages.supported() probes that); SPECDECODE_HUGE_PAGES=0 leaves them on 4 KB pages. In a
    fresh process, as a command loads its models. A Q4_0 model, whose weights every x86 build of
    llama.cpp repacks into its own layout (the shipped Q5_0 draft only an AMX build does)."""
    import os
    import subprocess

    child = """
import json
from specdecode.models.backends import huge_pages, llamacpp
from specdecode.models.registry import resolve
def anon_huge():
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("AnonHugePages:"))
before = anon_huge()
runner = llamacpp.LlamaCppRunner.load(llamacpp.requantized(resolve("default", "draft").gguf, "q4_0"), n_ctx=256,
                                      max_rows=1)
runner.add_rows([1, 2, 3])
width = runner.forward([[4]])[0].shape[1]
print(json.dumps({"moved": runner.huge_page_bytes, "grew": anon_huge() - before, "width": width,
                  "supported": huge_pages.supported()}))
"""
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPECDECODE_HUGE_PAGES": setting})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["width"] > 0
    if setting == "1" and got["supported"]:
        assert got["moved"] > 100 << 20 and got["grew"] >= got["moved"] * 0.9
    else:
        assert got["moved"] == 0


@needs_llamacpp
@pytest.mark.realmodel
def test_passes_of_a_few_tokens_score_like_one_token_passes():
    """A verify pass of 2-9 tokens on the Q4_0 target (Q4_0 layers, a Q6_K output layer) gives each
    token the logits it gets fed alone, up to llama.cpp's batched rounding. On an AMX build, passes of
    2-8 tokens run make/llama-cpp-amx-rows.patch's kernels (9 runs the tiles), and the build has them;
    on any other build with AVX2 and FMA, every Q4_0 layer and the Q6_K output layer run
    make/llama-cpp-repack-rows.patch's kernels (AVX-512 VNNI ones where the build has it, AVX2 ones
    elsewhere; 9 tokens: eight rows, then one), and the build has them."""
    import random

    from specdecode.models.backends import ggml_thread
    from specdecode.models.registry import resolve

    info = llamacpp.system_info()
    if ggml_thread.has_amx():
        assert ggml_thread.vnni_rows_max() == 8 and "AMX_VNNI_ROWS = 8" in info
    if "AVX2 = 1" in info and "FMA = 1" in info:
        version = ggml_thread.exported_int("specdecode_q4_0_rows_kernel")
        assert version > 0 and f"Q4_0_ROWS = {version} |" in info
        version = ggml_thread.exported_int("specdecode_q6_K_rows_kernel")
        assert version > 0 and f"Q6_K_ROWS = {version} |" in info
    r = llamacpp.LlamaCppRunner.load(llamacpp.requantized(resolve("default", "target").gguf, "q4_0"), n_ctx=512)
    rng = random.Random(0)
    prefix = [rng.randrange(1000, 30000) for _ in range(40)]
    for width in range(2, 10):
        tokens = [rng.randrange(1000, 30000) for _ in range(width)]
        block = logits_of(r, prefix, tokens)
        r.add_rows(prefix)
        singles = torch.stack([r.forward([[t]])[0][0] for t in tokens])
        r.remove_rows([0])
        gap = (singles - block).abs().max()
        assert gap < 0.5, width
        assert (singles.argmax(-1) == block.argmax(-1)).float().mean() >= 0.75, width
        # Control: another token's logits are far off, so a kernel that mixed up rows would fail.
        assert (singles.roll(1, 0) - block).abs().max() > 10 * gap, width
    assert r.rows == 0


@needs_llamacpp
@pytest.mark.realmodel
def test_the_q6_k_output_layer_scores_like_the_same_weights_at_q8_0(tmp_path):
    """The Q4_0 target keeps its output projection at Q6_K, which an AVX-512 VNNI build runs through
    make/llama-cpp-repack-rows.patch's Q6_K kernel. The same model with that projection at Q8_0 (its
    Q6_K values requantised: the layers are the same bytes) runs llama.cpp's Q8_0 kernels instead, so
    the two must give nearly the same logits (as stock llama.cpp's Q6_K kernels do), in a one-token
    pass and in passes of 4 and 9 tokens (the kernel's eight rows and then one). Control: the logits of other positions are far off, so a kernel
    that mixed up scales, columns or rows would fail."""
    import random

    import llama_cpp
    from gguf import GGUFReader

    from specdecode.models.registry import resolve

    shipped = resolve("default", "target").gguf
    source = llamacpp.requantized(shipped, "q4_0")
    q8_out = tmp_path / "q8-output.gguf"  # from the shipped file as `source` was, but the output at Q8_0
    llamacpp.quantize(shipped, q8_out, "q4_0", output_type=llama_cpp.GGML_TYPE_Q8_0)

    def output_type(path):
        return next(t.tensor_type.name for t in GGUFReader(str(path)).tensors if t.name == "output.weight")

    assert (output_type(source), output_type(q8_out)) == ("Q6_K", "Q8_0")
    q6, q8 = llamacpp.LlamaCppRunner.load(source, n_ctx=256), llamacpp.LlamaCppRunner.load(q8_out, n_ctx=256)
    rng = random.Random(1)
    prefix = [rng.randrange(1000, 30000) for _ in range(30)]
    for width in (1, 4, 9):
        tokens = [rng.randrange(1000, 30000) for _ in range(width)]
        a, b = logits_of(q6, prefix, tokens), logits_of(q8, prefix, tokens)
        gap = (a - b).abs().max()
        # Loose: Q8_0 rounds the Q6_K values again. Mixed-up scales or columns are off by far more.
        assert gap < 0.5, (width, float(gap))
        if width > 1:
            assert (a.roll(1, 0) - b).abs().max() > 10 * gap, width
        else:
            assert (a[:, torch.randperm(a.shape[1], generator=torch.Generator().manual_seed(0))] - b).abs().max() > 10 * gap
    q6.close()
    q8.close()
