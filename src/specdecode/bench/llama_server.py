"""llama.cpp's own server (`llama-server`, built by `make llama-server`) as a peer: started on a
loopback port, driven through its native `/completion` API one request at a time.

Three bench methods: `llama-server` decodes plainly; `llama-server-ngram` runs llama.cpp's own
n-gram cache speculation (`--spec-type ngram-cache`), which drafts up to 8 tokens a pass whatever it
is asked (the bound is fixed in llama.cpp's source: no flag or request field sets it, so the method
takes no k); `llama-server-draft` its draft-model speculation (`--spec-type draft-simple` with the
default draft's GGUF) with k drafts a pass, one server per k (`--spec-draft-n-max k`: the server
bounds a draft by its own setting, not by a request's `speculative.n_max`). Requests send the
prompt as token ids (no second tokenizer),
`cache_prompt: false` (every run prefills, as ours do), llama.cpp's sampler set to ours (greedy at
T = 0; else temperature, top-k, top-p and min-p, no penalties), and stream the tokens back with
their ids.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from ..models.backends.llamacpp import default_threads
from ..sampling.params import SamplingParams
from .result import Run

SPEC_TYPES = {"llama-server": None, "llama-server-ngram": "ngram-cache", "llama-server-draft": "draft-simple"}


def binary() -> Path | None:
    """The llama-server `make llama-server` put beside this Python, else one on PATH."""
    here = Path(sys.prefix) / "bin" / "llama-server"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("llama-server")
    return Path(found) if found else None


class LlamaServer:
    """A llama-server process on a free loopback port; `url` once it answers /health."""

    def __init__(self, gguf: str | Path, *extra: str, context: int = 4096, threads: int | None = None,
                 timeout_s: float = 300.0):
        exe = binary()
        if exe is None:
            raise FileNotFoundError("llama-server is not built: run `make llama-server` (about 7 minutes, once)")
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        threads = threads or default_threads()  # as our llama.cpp runner's (SPECDECODE_LLAMACPP_THREADS)
        self.url = f"http://127.0.0.1:{port}"
        self.command = [str(exe), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--metrics",
                        "-c", str(context), "-np", "1", "-t", str(threads), "-tb", str(threads), *extra]
        # Its log goes to a file: a pipe nobody reads fills after a few hundred requests and blocks it.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=self.log, text=True)
        atexit.register(self.close)  # a bench that fails midway must not leave servers running
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}): {self.log.read()[-800:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"llama-server did not become ready in {timeout_s:.0f} s")

    def cpu_seconds(self) -> float | None:
        """CPU time the server process has used (Linux /proc), None where it cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_idle(self, quiet_s: float = 0.03, limit_s: float = 2.0) -> None:
        """Return once the server's threads have stopped spinning: after a request, llama.cpp's
        threads poll for work for a while, and on a small CPU that would slow whatever the bench runs
        next. Idle means no CPU time used for quiet_s; the wait gives up after limit_s."""
        deadline = time.monotonic() + limit_s
        last = self.cpu_seconds()
        if last is None:
            time.sleep(quiet_s)
            return
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = self.cpu_seconds()
            if now is None or now == last:
                return
            last = now

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sampling_fields(params: SamplingParams) -> dict:
    """llama.cpp's sampler set to ours: its defaults (top-k 40, top-p 0.95, min-p 0.05) switched off."""
    if params.greedy:
        return {"temperature": 0.0, "top_k": 1}
    return {"temperature": params.temperature, "top_k": params.top_k or 0, "top_p": params.top_p,
            "min_p": params.min_p, "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


class LlamaServerMethod:
    """A bench method over a running llama-server (see the module docstring)."""

    backend = "llamacpp"
    takes_auto = False

    def __init__(self, name: str, gguf: str | Path, draft_gguf: str | Path | None = None):
        spec = SPEC_TYPES[name]
        self.name = name
        self.takes_k = spec == "draft-simple"
        self.gguf = gguf
        self.extra: list[str] = [] if spec is None else ["--spec-type", spec]
        if self.takes_k:
            if draft_gguf is None:
                raise ValueError(f"{name} needs the draft as a GGUF file")
            self.extra += ["-md", str(draft_gguf)]
        self.servers: dict[int | None, LlamaServer] = {}
        self.client = httpx.Client(timeout=600)

    def server_for(self, k: int | None) -> "LlamaServer":
        """The server that drafts k tokens a pass (one for a method without k), started on first use
        (the bench's untimed warm-up run starts the first, and reports a server that cannot start)
        and sent one short request untimed, so that no server's first timed run is its first."""
        key = int(k) if self.takes_k else None
        if key not in self.servers:
            server = self.servers[key] = LlamaServer(
                self.gguf, *self.extra, *(["--spec-draft-n-max", str(key)] if key is not None else []))
            self.client.post(f"{server.url}/completion",
                             json={"prompt": "Hello", "n_predict": 4, "cache_prompt": False}).raise_for_status()
            server.wait_idle()
        return self.servers[key]

    def run(self, prompt_ids, params, k) -> Run:
        body = {"prompt": list(prompt_ids), "n_predict": params.max_new_tokens, "stream": True, "return_tokens": True,
                "cache_prompt": False, "ignore_eos": params.ignore_eos, **sampling_fields(params)}
        if params.seed is not None:
            body["seed"] = params.seed
        server = self.server_for(k)
        tokens: list[int] = []
        steps: list[tuple[float, int]] = []
        timings: dict = {}
        start = time.perf_counter()
        with self.client.stream("POST", f"{server.url}/completion", json=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"llama-server answered HTTP {response.status_code}: {response.read()[:300]!r}")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                got = [int(t) for t in event.get("tokens") or []]
                if got:
                    tokens += got
                    steps.append((time.perf_counter() - start, len(got)))
                if event.get("stop"):
                    timings = event.get("timings") or {}
                    break
        total = time.perf_counter() - start
        server.wait_idle()
        drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
        return Run(token_ids=tokens[: params.max_new_tokens], total_s=total, steps=steps, drafted=drafted,
                   accepted=accepted)

    def close(self) -> None:
        self.client.close()
        for server in self.servers.values():
            server.close()
