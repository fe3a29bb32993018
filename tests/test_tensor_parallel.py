"""The target sharded over two processes (torchrun, gloo, tp_plan="auto") decodes exactly what a
single process decodes (greedy, float32, tiny model)."""

import json
import os
import subprocess
import sys
from pathlib import Path



def generate(args, nproc=None, timeout=300):
    cli = ["-m", "specdecode", "generate", *args, "--json"]
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *cli]
    else:
        cmd = [sys.executable, *cli]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout  # only rank 0 prints
    return json.loads(lines[0])


def test_two_process_tensor_parallel_equals_single_process(tiny_dirs):
    # The draft proposer exercises both the one-token passes and multi-token verification.
    args = ["def f(x):", "--target", tiny_dirs["target"], "--draft", tiny_dirs["draft"], "--proposer", "draft",
            "--k", "3", "--max-new-tokens", "24", "--dtype", "fp32", "--ignore-eos", "--no-chat"]
    single = generate(args)
    sharded = generate(args, nproc=2)
    assert sharded["token_ids"] == single["token_ids"]
