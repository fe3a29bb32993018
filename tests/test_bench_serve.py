"""`specdecode bench --serve FLAGS`: the bench starts real `specdecode serve` processes on free
loopback ports, waits until they are loaded, drives them as `--endpoint` does (one load-tested, two
paired), and stops them; a server that cannot start is one clear error with the end of its log."""

import json
import subprocess

import pytest

from clirun import run_cli

WORK = ("--workload", "code", "--limit", "2", "--max-new-tokens", "8", "--ignore-eos", "--api", "completions")


def serve_flags(tiny_dirs, *extra: str) -> str:
    return " ".join(("--target", tiny_dirs["target"], "--dtype", "fp32", "--served-model-name", "tiny", *extra))


def test_two_started_servers_are_paired_then_stopped(tiny_dirs, capsys, monkeypatch, tmp_path):
    started = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen)
    run_cli(capsys, monkeypatch, "bench", "--serve", serve_flags(tiny_dirs, "--proposer", "none"), "--serve",
            serve_flags(tiny_dirs, "--proposer", "draft", "--draft", tiny_dirs["draft"], "--k", "3"), *WORK,
            "--out", str(tmp_path))
    report = json.loads((tmp_path / "paired.json").read_text())
    level = report["levels"][0]
    assert level["order"] == "ABBA" and level["prompts"] == 2 and level["errors"] == {"A": 0, "B": 0}
    servers = json.loads((tmp_path / "servers.json").read_text())
    assert [s["url"] for s in servers] == [report["A"]["endpoint"], report["B"]["endpoint"]]
    assert "--proposer draft" in servers[1]["serve_flags"] and (tmp_path / "serve-B.log").is_file()
    # Both processes were stopped when the run ended.
    assert len(started) == 2 and all(p.poll() is not None for p in started)


def test_one_started_server_is_load_tested(tiny_dirs, capsys, monkeypatch, tmp_path):
    run_cli(capsys, monkeypatch, "bench", "--serve", serve_flags(tiny_dirs, "--proposer", "ngram"), *WORK,
            "--requests", "2", "--out", str(tmp_path))
    rows = json.loads((tmp_path / "results.json").read_text())
    assert rows[0]["requests"] == 2 and rows[0]["errors"] == 0 and rows[0]["tokens_per_s"] > 0


@pytest.mark.parametrize("args,message", [
    (("--serve", "--port 9000"), "the bench picks each server's loopback port itself"),
    (("--serve", "--proposer 'none"), "is not a shell-quoted flag list"),
    (("--serve", "--k 0", "--endpoint", "http://127.0.0.1:1"), "give one of them"),
    (("--serve", "a", "--serve", "b", "--serve", "c"), "--serve takes one server (a load test) or two (paired)"),
    # Options one mode would not read are refused, not dropped: a served bench's --json-schema or --k
    # would not reach the server, an in-process bench's --requests would change nothing.
    (("--serve", "--k 0", "--json-schema", "s.json", "--k", "2"), "--k, --json-schema have no effect on a running server"),
    (("--endpoint", "http://127.0.0.1:1", "--serve-timeout", "5"), "--serve-timeout has no effect with --endpoint"),
    (("--requests", "4", "--api", "completions"), "--requests, --api have no effect in the in-process bench"),
])
def test_bad_serve_flags_are_refused(capsys, monkeypatch, args, message):
    assert message in run_cli(capsys, monkeypatch, "bench", *args, code=2)["stderr"]


def test_a_server_that_cannot_start_is_one_error_with_its_log(capsys, monkeypatch, tmp_path):
    said = run_cli(capsys, monkeypatch, "bench", "--serve", "--target /no/such/dir", *WORK, "--out", str(tmp_path),
                   code=2)["stderr"]
    assert "exited (code" in said and "before it answered /health" in said
    assert "/no/such/dir" in said  # the log's tail says what was wrong


def test_a_system_prompt_is_sent_before_every_chat_prompt(tiny_dirs, capsys, monkeypatch, tmp_path):
    """--system-prompt-file with a served model: every chat request carries it as the first message."""
    from specdecode.bench import endpoint

    sent = []
    real = endpoint.one_request

    async def recording(client, url, body, tokenizer, chat):
        sent.append(body)
        return await real(client, url, body, tokenizer, chat)

    monkeypatch.setattr(endpoint, "one_request", recording)
    system = tmp_path / "system.txt"
    system.write_text("Answer as briefly as you can.")
    run_cli(capsys, monkeypatch, "bench", "--serve", serve_flags(tiny_dirs, "--proposer", "ngram"), "--workload", "code",
            "--limit", "2", "--max-new-tokens", "4", "--requests", "2", "--system-prompt-file", str(system),
            "--out", str(tmp_path / "out"))
    assert len(sent) == 2
    for body in sent:
        assert body["messages"][0] == {"role": "system", "content": "Answer as briefly as you can."}
        assert body["messages"][1]["role"] == "user"
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    assert rows[0]["errors"] == 0
