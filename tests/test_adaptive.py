"""k="auto": the controller moves k the expected way, and outputs stay exact."""

import pytest

from specdecode import SamplingParams
from specdecode.adaptive import AdaptiveK


def test_controller_grows_on_full_acceptance_and_shrinks_on_rejection():
    c = AdaptiveK(k_max=8, k=4)
    for _ in range(5):
        c.update(drafted=c.k, accepted=c.k)
    assert c.k == 8
    for _ in range(10):
        c.update(drafted=c.k, accepted=0)
    assert c.k == 1
    # A short block that was fully accepted (the draft stopped early on its own) is no reason to grow.
    c = AdaptiveK(k_max=8, k=4)
    c.update(drafted=2, accepted=2)
    assert c.k == 4
    with pytest.raises(ValueError):
        AdaptiveK(k_max=2, k=4)


def greedy(n):
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def test_auto_drafts_long_blocks_for_a_perfect_draft(twin_gen):
    # A random tiny model is never confident (top probability ~0.1), so this test switches the
    # confidence stop off and watches the controller alone.
    twin_gen.auto_min_confidence = 0.0
    try:
        out = twin_gen.generate("abc", greedy(60), k="auto", chat=False, proposer="draft")
    finally:
        twin_gen.auto_min_confidence = 0.4
    fixed = twin_gen.generate("abc", greedy(60), k=4, chat=False, proposer="draft")
    assert out.token_ids == fixed.token_ids
    assert out.stats["mean_accepted_tokens"] > fixed.stats["mean_accepted_tokens"]
    assert len(out.stats["per_position_acceptance"]) == 8  # k climbed to k_max


def test_auto_backs_off_for_a_bad_draft(small_draft_gen):
    out = small_draft_gen.generate("abc", greedy(40), k="auto", chat=False, proposer="draft")
    plain = small_draft_gen.generate("abc", greedy(40), k=0, chat=False, proposer="none")
    assert out.token_ids == plain.token_ids
    # Mostly rejected: k falls to 1, so most passes draft a single token.
    assert out.stats["drafted_tokens"] / out.stats["target_passes"] < 1.6


@pytest.mark.parametrize("proposer", ["draft", "ngram"])
def test_auto_greedy_equals_plain(twin_gen, small_draft_gen, proposer):
    for gen in (twin_gen, small_draft_gen):
        for prompt in ("def f(x):", "the the the the"):
            plain = gen.generate(prompt, greedy(30), k=0, chat=False, proposer="none")
            assert gen.generate(prompt, greedy(30), k="auto", chat=False, proposer=proposer).token_ids == \
                plain.token_ids


def test_confidence_stop_shortens_drafts(twin_gen):
    twin_gen.auto_min_confidence = 0.99  # nothing is that sure: one draft per pass
    try:
        out = twin_gen.generate("abc", greedy(30), k="auto", chat=False, proposer="draft")
    finally:
        twin_gen.auto_min_confidence = 0.4
    assert out.stats["drafted_tokens"] <= out.stats["target_passes"]
    assert len(out.stats["per_position_acceptance"]) == 1


def test_bad_k_is_a_clear_error(twin_gen):
    from specdecode import InvalidParameter

    with pytest.raises(InvalidParameter, match="or 'auto'"):
        twin_gen.generate("x", greedy(3), k="sometimes")
