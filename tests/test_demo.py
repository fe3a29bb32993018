"""The demo's pieces on tiny models: our configuration beside the plain decoders, speedups over the
fastest plain decoder measured on each prompt, and notes that state only what the run measured."""

from specdecode import SamplingParams
from specdecode.advise import demo

PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)


def out(rate, stats=None, ids=(1, 2, 3)):
    return demo.Output(list(ids), "", rate, stats)


def test_rows_compare_each_prompt_with_the_fastest_plain_decoder(twin_gen, small_draft_gen):
    decoders = [demo.engine_decoder("ours plain", twin_gen, plain=True),
                demo.engine_decoder("other plain", small_draft_gen, plain=True),
                demo.engine_decoder("ours draft k=3", twin_gen, plain=False, proposer="draft", k=3)]
    rows = demo.run(decoders, ["abc", "hello there"], PARAMS, reference="ours plain")
    assert [r.method for r in rows] == ["ours plain", "other plain", "ours draft k=3"] * 2
    for prompt in (1, 2):
        mine = [r for r in rows if r.prompt == prompt]
        fastest = max((r for r in mine if r.plain), key=lambda r: r.output.decode_tokens_per_s)
        assert all(r.fastest_plain == fastest.method for r in mine) and fastest.speedup == 1.0
        assert all(r.speedup == r.output.decode_tokens_per_s / fastest.output.decode_tokens_per_s for r in mine)
    spec = [r for r in rows if r.method == "ours draft k=3"]
    assert all(r.same_as_reference for r in spec)  # fp32: speculation reproduces plain exactly
    assert all(r.output.stats["acceptance_rate"] == 1.0 for r in spec)  # the twin draft


def test_summary_states_what_was_measured_and_where_it_lost():
    rows = [demo.DemoRow(1, "llama.cpp plain", True, out(30.0), 1.0, "llama.cpp plain", False, 2),
            demo.DemoRow(1, "ours", False, out(45.0), 1.5, "llama.cpp plain", True, None),
            demo.DemoRow(2, "llama.cpp plain", True, out(30.0), 1.0, "llama.cpp plain", False, 2),
            demo.DemoRow(2, "ours", False, out(27.0), 0.9, "llama.cpp plain", True, None)]
    first, lost = demo.summary(rows, "ours")
    assert "1.50x, 0.90x the fastest plain decoder" in first and "fastest plain: llama.cpp plain" in first
    assert lost == "prompt 2: llama.cpp plain was faster than ours here (0.90x)"


def test_notes_say_why_when_slower_or_different():
    stats = {"drafted_tokens": 2, "target_passes": 40, "acceptance_rate": 0.1, "mean_accepted_tokens": 1.05}
    slow = demo.DemoRow(2, "ours", False, out(10.0, stats), 0.97, "plain", True, None)
    (note,) = demo.explain(slow, "bfloat16")
    assert "drafted little" in note
    busy = demo.DemoRow(1, "ours", False, out(10.0, {**stats, "drafted_tokens": 80}), 0.9, "plain", False, 17)
    notes = demo.explain(busy, "bfloat16")
    assert "not enough for what drafting" in notes[0]
    assert "token 17" in notes[1] and "float32" in notes[1]
    assert demo.explain(demo.DemoRow(1, "plain", True, out(10.0, stats), 1.0, "plain", True, None), "bf16") == []
    assert demo.first_difference([1, 2, 3], [1, 2, 4]) == 2 and demo.first_difference([1], [1]) is None
    assert demo.first_difference([1, 2], [1]) == 1
