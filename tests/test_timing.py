"""The one timing rule every choice by measurement uses (models/timing.py)."""

from specdecode.models.timing import alternating_medians


def test_tasks_take_turns_and_warmup_and_cleanup_are_not_timed():
    order, cleaned = [], []
    tasks = {name: (lambda name=name: order.append(name)) for name in "abc"}
    seconds = alternating_medians(tasks, rounds=3, warmup_rounds=1, serpentine=True, after=cleaned.append)
    # Round 0 (warm-up) a b c, round 1 reversed, round 2 forward, round 3 reversed.
    assert order == list("abc" + "cba" + "abc" + "cba")
    assert cleaned == order  # after() follows every call
    assert set(seconds) == set("abc") and all(s >= 0 for s in seconds.values())


def test_the_median_drops_one_slow_round():
    import time

    calls = {"n": 0}

    def sometimes_slow():
        calls["n"] += 1
        if calls["n"] == 2:
            time.sleep(0.05)  # one round a neighbour's burst fell on

    seconds = alternating_medians({"x": sometimes_slow}, rounds=5)
    assert seconds["x"] < 0.01  # the mean would be over 0.01 s
