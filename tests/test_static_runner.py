"""The static-cache runner: same logits as the dynamic cache through extend, rollback, reset and
growth; the compiled one-token step agrees with eager; greedy speculation on it equals plain."""

import pytest
import torch

import tiny
from tiny import reference_logits
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.backends.hf_static import StaticRunner


def script(runner):
    """Prefill, single steps, a verify-like block, rollbacks, and a new sequence."""
    out = [runner.forward(list(range(10, 30)))]
    for t in (3, 4, 5):
        out.append(runner.forward([t]))
    out.append(runner.forward([7, 8, 9, 10], all_logits=True))
    runner.truncate(runner.length - 3)  # three drafts rejected
    out.append(runner.forward([11]))
    out.append(runner.forward([12, 13], all_logits=True))
    runner.truncate(5)
    out.append(runner.forward([1, 2]))
    runner.reset()
    out.append(runner.forward([40, 41, 42]))
    out.append(runner.forward([43]))
    return out, runner.length


def reference_script(model):
    """What script() must return, from uncached forwards over each whole sequence."""
    seq = list(range(10, 30))
    out = [reference_logits(model, seq, 1)]
    for t in (3, 4, 5):
        seq.append(t)
        out.append(reference_logits(model, seq, 1))
    out.append(reference_logits(model, seq + [7, 8, 9, 10], 4))
    seq += [7]  # three of the four rejected
    out.append(reference_logits(model, seq + [11], 1))
    seq += [11]
    out.append(reference_logits(model, seq + [12, 13], 2))
    seq = seq[:5]
    out.append(reference_logits(model, seq + [1, 2], 1))
    seq = [40, 41, 42]
    out.append(reference_logits(model, seq, 1))
    out.append(reference_logits(model, seq + [43], 1))
    return out


def test_static_cache_equals_uncached_forwards_through_rollback_reset_and_growth():
    model = tiny.model(seed=3)
    static = StaticRunner(model, initial=8)  # grows 8 -> 16 -> 32 inside the script
    got, n_static = script(static)
    assert n_static == 4
    assert static.capacity == 32
    for a, b in zip(reference_script(model), got):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_stale_positions_are_masked_after_a_rollback():
    """After a rollback the old entries are still in the cache; they must not be attended to."""
    model = tiny.model(seed=4)
    runner = StaticRunner(model)
    runner.forward([5, 6, 7])
    runner.forward([99, 98, 97, 96], all_logits=True)
    runner.truncate(3)
    after = runner.forward([8])
    fresh = StaticRunner(model)
    fresh.forward([5, 6, 7])
    torch.testing.assert_close(after, fresh.forward([8]))
    # Control: without the rollback the output differs, so the comparison can fail.
    polluted = StaticRunner(model)
    polluted.forward([5, 6, 7, 99, 98, 97, 96])
    assert not torch.allclose(polluted.forward([8]), after, atol=1e-4)


def test_context_limit_is_a_clear_error():
    runner = StaticRunner(tiny.model(max_positions=16), initial=8)
    runner.forward(list(range(16)))
    with pytest.raises(ValueError, match="context of 16"):
        runner.forward([1])


def test_compiled_step_agrees_with_eager_and_speculation_stays_exact(tok):
    target, draft = tiny.model(seed=0), tiny.model(hidden=32, layers=1, seed=1)
    compiled = StaticRunner(draft, compile=True)
    eager = StaticRunner(draft)
    for runner in (compiled, eager):
        runner.forward([5, 6, 7, 8])
    for t in (9, 10, 11):
        torch.testing.assert_close(compiled.forward([t]), eager.forward([t]), rtol=1e-4, atol=1e-4)
    assert compiled.compile_s > 0
    # Runners pass through as they are: a static target (verify widths vary: eager) and a draft
    # whose one-token step is compiled, what --target hf-static: / --draft hf-compile: build.
    gen = SpeculativeGenerator.from_models(StaticRunner(target), tok, "draft", StaticRunner(draft, compile=True), tok)
    plain = SpeculativeGenerator.from_models(target, tok, "none")
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for prompt in ("def f(x):", "abcabcabc"):
        assert gen.generate(prompt, params, k=3, chat=False).token_ids == \
            plain.generate(prompt, params, k=0, chat=False).token_ids
    # Single-sequence runners serve their rows one after another.
    assert gen.target.backend == "torch-static" and gen.proposers["draft"].runner.backend == "torch-compiled"
    tiny.batch_equals_plain(gen, plain, params)
