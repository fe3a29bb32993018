"""`specdecode verify` on tiny checkpoints: the right algorithm passes, the naive one is caught."""

import json
import sys

from specdecode import cli


def run_verify(monkeypatch, capsys, dirs, *extra):
    args = ["specdecode", "verify", "hello", "--target", dirs["target"], "--draft", dirs["draft"], "--dtype", "fp32",
            "--proposer", "draft,ngram", "--samples", "600", "--length", "2", "--k", "3", "--json", *extra]
    monkeypatch.setattr(sys, "argv", args)
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
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
    report = run_verify(monkeypatch, capsys, tiny_dirs, "--seed", "2", "--naive")
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
