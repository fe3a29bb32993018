"""The demo's pieces on tiny models: plain beside the speculative configuration, and its notes."""

from specdecode import SamplingParams
from specdecode.advise import demo


def test_rows_compare_each_prompt_with_plain(twin_gen):
    rows = demo.run(twin_gen, ["abc", "hello there"], SamplingParams(max_new_tokens=12, ignore_eos=True),
                    proposer="draft", k=3)
    assert [r.method for r in rows] == ["plain", "draft k=3"] * 2
    assert all(r.same_as_plain for r in rows)  # fp32: speculation reproduces plain exactly
    assert rows[0].speedup == 1.0 and rows[1].stats["acceptance_rate"] == 1.0  # the twin draft


def test_notes_say_why_when_slower_or_different():
    stats = {"drafted_tokens": 2, "target_passes": 40, "acceptance_rate": 0.1, "mean_accepted_tokens": 1.05}
    slow = demo.DemoRow(2, "hybrid k=auto", "", stats, 0.97, True, None)
    (note,) = demo.explain(slow, "bfloat16")
    assert "drafted little" in note and "0.97x" in note
    busy = demo.DemoRow(1, "hybrid k=auto", "", {**stats, "drafted_tokens": 80}, 0.9, False, 17)
    notes = demo.explain(busy, "bfloat16")
    assert "not enough for what a draft token costs" in notes[0]
    assert "token 17" in notes[1] and "float32 reproduces plain" in notes[1]
    assert demo.explain(demo.DemoRow(1, "plain", "", stats, 1.0, True, None), "bfloat16") == []
    assert demo.first_difference([1, 2, 3], [1, 2, 4]) == 2 and demo.first_difference([1], [1]) is None
    assert demo.first_difference([1, 2], [1]) == 1


def test_the_reference_row_and_what_it_says(twin_gen, small_draft_gen):
    rows = demo.run(twin_gen, ["abc"], SamplingParams(max_new_tokens=8, ignore_eos=True), proposer="draft", k=2,
                    reference=small_draft_gen)
    assert [r.method for r in rows] == ["plain", "draft k=2", demo.REFERENCE]
    stats = {"drafted_tokens": 40, "target_passes": 20, "acceptance_rate": 0.9, "mean_accepted_tokens": 3.0}
    slow_spec = [demo.DemoRow(1, "plain", "", stats, 1.0, True, None),
                 demo.DemoRow(1, "hybrid k=auto", "", stats, 2.4, True, None),
                 demo.DemoRow(1, demo.REFERENCE, "", stats, 4.8, False, 3)]
    (note,) = demo.summary(slow_spec)
    assert "llama.cpp target (4.80x plain torch) beats speculation" in note
    assert demo.explain(slow_spec[2], "bfloat16") == []  # a reference row is not ours to explain
    slow_spec[2].speedup = 1.5
    assert demo.summary(slow_spec) == []
