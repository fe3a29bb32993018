"""The CLI end to end on tiny checkpoints: output formats, and one-line errors for bad input."""

import json
import sys

import pytest

from specdecode import cli


def run(monkeypatch, capsys, *args):
    monkeypatch.setattr(sys, "argv", ["specdecode", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_generate_json(monkeypatch, capsys, tiny_dirs):
    code, out, err = run(monkeypatch, capsys, "generate", "hello", "--target", tiny_dirs["target"], "--draft",
                         tiny_dirs["draft"], "--k", "3", "--max-new-tokens", "12", "--draft-context", "2", "--dtype", "fp32",
                         "--ignore-eos", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert set(result) == {"text", "token_ids", "stats"}
    assert len(result["token_ids"]) == 12
    for key in ("new_tokens", "target_passes", "drafted_tokens", "accepted_tokens", "acceptance_rate",
                "mean_accepted_tokens", "per_position_acceptance", "tokens_per_s", "ttft_s", "draft_s", "verify_s"):
        assert key in result["stats"], key


def test_generate_streams_and_summarises(monkeypatch, capsys, tiny_dirs):
    code, out, err = run(monkeypatch, capsys, "generate", "hello", "--target", tiny_dirs["target"],
                         "--proposer", "ngram", "--max-new-tokens", "10", "--dtype", "float32", "--no-chat",
                         "--temperature", "0.8", "--top-p", "0.9", "--seed", "1")
    assert code == 0, err
    assert "[ngram, k=auto]" in err and "tok/s" in err  # k=auto is the default and "acceptance" in err and "mean accepted" in err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--target", "/no/such/dir"], "target model '/no/such/dir' not found"),
        (["--draft", "BIGVOCAB"], "vocabularies do not match"),
        (["--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["--top-p", "1.5"], r"top_p must be in (0, 1]"),
        (["--max-new-tokens", "0"], "max_new_tokens must be an integer >= 1"),
        (["--k", "x"], "--k must be a whole number"),
        (["--proposer", "magic"], "unknown proposer 'magic'"),
        (["--dtype", "int3"], "unknown dtype 'int3'"),
        (["--draft-context", "-5"], "--draft-context is a number of prompt tokens >= 1"),
        (["--prompt", ""], "the prompt is empty"),
        (["--prompt", "word " * 600], "but the target's context is 512"),
    ],
)
def test_bad_input_is_one_line_error(monkeypatch, capsys, tiny_dirs, args, message):
    prompt = "hello"
    if args[0] == "--prompt":
        prompt, args = args[1], []
    args = [a.replace("BIGVOCAB", tiny_dirs["bigvocab"]) for a in args]
    base = {"--target": tiny_dirs["target"], "--draft": tiny_dirs["draft"], "--dtype": "fp32"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    flat = [x for pair in base.items() for x in pair]
    code, out, err = run(monkeypatch, capsys, "generate", prompt, *flat)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
