"""`specdecode verify` on tiny checkpoints: the right algorithm passes, the naive one is caught."""

import json
import sys

from specdecode import cli


def run_verify(monkeypatch, capsys, dirs, *extra, code=0):
    args = ["specdecode", "verify", "hello", "--target", dirs["target"], "--draft", dirs["draft"], "--dtype", "fp32",
            "--proposer", "draft,ngram", "--samples", "600", "--length", "2", "--k", "3", "--json", *extra]
    monkeypatch.setattr(sys, "argv", args)
    try:
        cli.main()
    except SystemExit as exc:
        assert (exc.code or 0) == code, capsys.readouterr().err
    else:
        assert code == 0
    return json.loads(capsys.readouterr().out)


def test_verify_passes_for_exact_sampling(monkeypatch, capsys, tiny_dirs):
    report = run_verify(monkeypatch, capsys, tiny_dirs, "--seed", "1")
    assert report["passed"], report
    for name in ("draft", "ngram"):
        r = report["results"][name]
        for key in ("samples", "tv_distance", "tv_bound", "p_value", "passed"):
            assert key in r
        assert r["samples"] == 600
        assert r["first_token_exact"]["passed"]
    assert report["plain_first_token_exact"]["passed"]


def test_verify_catches_the_naive_residual(monkeypatch, capsys, tiny_dirs):
    # The tiny draft and target disagree a lot, so the naive residual's bias is large.
    report = run_verify(monkeypatch, capsys, tiny_dirs, "--seed", "2", "--naive", code=1)  # exit 1: CI fails
    assert not report["passed"]
    assert not report["results"]["draft"]["first_token_exact"]["passed"]


def test_verify_rejects_greedy(monkeypatch, capsys, tiny_dirs):
    monkeypatch.setattr(sys, "argv", ["specdecode", "verify", "x", "--target", tiny_dirs["target"], "--temperature",
                                      "0", "--dtype", "fp32"])
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code == 2
    assert "use --temperature > 0" in capsys.readouterr().err


def test_verify_passes_with_block_verification_and_with_trees(monkeypatch, capsys, tiny_dirs):
    # top-k 3: the tiny draft is then unsure between a few tokens, and branches on its second choice.
    for extra in (("--verifier", "block"), ("--tree", "6", "--top-k", "3")):
        report = run_verify(monkeypatch, capsys, tiny_dirs, "--seed", "3", *extra)
        assert report["passed"], (extra, report)
        assert report["verifier"] == extra[1] or report["tree"] == 6


def test_verify_with_trees_catches_the_naive_residual(monkeypatch, capsys, tiny_dirs):
    # Full support, where the naive residual's bias is large enough for 600 samples (the engine-level
    # tree control in test_tree.py measures the tree walk's own wrong residual at 1,500).
    report = run_verify(monkeypatch, capsys, tiny_dirs, "--seed", "4", "--tree", "6", "--naive", code=1)
    assert not report["passed"]


def test_verify_passes_with_a_shortlisted_draft_and_catches_the_naive_residual(monkeypatch, capsys, tiny_dirs):
    # The tiny draft scoring 200 of its 259 tokens: q is zero on the other 59.
    dirs = {**tiny_dirs, "draft": tiny_dirs["draft"] + "+v200"}
    report = run_verify(monkeypatch, capsys, dirs, "--seed", "5")
    assert report["passed"], report
    # The shortlist leaves the naive residual a smaller bias than a full draft: more samples to see it.
    report = run_verify(monkeypatch, capsys, dirs, "--seed", "6", "--naive", "--samples", "1500", code=1)
    assert not report["passed"]


def test_verify_refuses_the_options_of_the_other_mode(monkeypatch, capsys, tiny_dirs):
    """An option the chosen mode would ignore is refused, never dropped silently: --naive with --endpoint
    would report a real server's check as the naive control's, --plot without it would draw nothing."""
    from clirun import run_cli

    err = run_cli(capsys, monkeypatch, "verify", "x", "--target", tiny_dirs["target"], "--plot", "d.png",
                  "--seeded", "--presence-penalty", "0.5", code=2)["stderr"]
    assert "--presence-penalty, --plot, --seeded have no effect without --endpoint" in err
    assert "Traceback" not in err
    err = run_cli(capsys, monkeypatch, "verify", "x", "--endpoint", "http://127.0.0.1:1", "--naive", "--k", "2",
                  code=2)["stderr"]
    assert "--k, --naive have no effect with --endpoint" in err
    # Given at their defaults they are read the same either way, and still refused: the user asked.
    err = run_cli(capsys, monkeypatch, "verify", "x", "--endpoint", "http://127.0.0.1:1", "--tree", "0",
                  code=2)["stderr"]
    assert "--tree has no effect with --endpoint" in err
    # The options both modes read pass: this run stops only at the unreachable server.
    err = run_cli(capsys, monkeypatch, "verify", "x", "--endpoint", "http://127.0.0.1:1", "--samples", "20",
                  "--top-k", "3", code=2)["stderr"]
    assert "cannot reach http://127.0.0.1:1" in err
