"""`specdecode verify`: sample many short continuations of one prompt with plain and speculative
decoding on real models, and test that their distributions agree.

Every continuation is a request through the engine's own `step()`, the code path `generate` and the
server run: rows with the same prompt share its prefill, then each drafts, is verified and
rolled back on its own. `--naive` runs the same engine with the wrong residual (checks/naive.py) so that
the check can be seen to fail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from ..engine.engine import Engine
from .goodness import FitResult, one_sample, two_sample
from .naive import naive_rejection_sample, naive_tree_residual
from ..engine.request import Request
from ..sampling.params import SamplingParams, probs_from_logits


def sample_continuations(gen: Engine, prompt_ids: list[int], n: int, length: int,
                         params: SamplingParams, k: int | str, proposer: str, seed: int, naive: bool = False,
                         progress: Callable[[int], None] | None = None, verifier: str = "token",
                         tree: int = 0) -> list[tuple[int, ...]]:
    """n continuations of `length` tokens; request i is seeded with seed + i; verifier and tree as
    in generate()."""
    plain = proposer == "none"
    reqs = [Request(list(prompt_ids), params.replace(max_new_tokens=length, ignore_eos=True, seed=seed + i),
                    k=0 if plain else k, proposer=proposer, verifier="token" if plain else verifier,
                    tree=0 if plain else tree) for i in range(n)]
    changes = {"max_waiting": max(n, gen.config.max_waiting)}
    if naive:
        changes["reject"] = naive_rejection_sample
        changes["tree_residual"] = naive_tree_residual
    with gen.configured(**changes):
        for req in reqs:
            gen.submit(req)
        done = 0
        while not gen.idle():
            gen.step()
            finished = sum(r.done for r in reqs)
            if progress and finished > done:
                progress(finished - done)
            done = finished
    failed = [r for r in reqs if r.finish_reason == "error"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {n} samples failed: {failed[0].error}")
    return [tuple(r.generated[:length]) for r in reqs]


@torch.inference_mode()
def first_token_probs(gen: Engine, prompt_ids: list[int], params: SamplingParams) -> dict[int, float]:
    """The target's exact distribution of the first new token, after the sampling transform (a scratch
    row on the idle engine's target)."""
    if not gen.idle():
        raise RuntimeError("first_token_probs needs an idle engine")
    target = gen.target
    target.add_rows(prompt_ids[:-1])
    try:
        logits = target.forward([[prompt_ids[-1]]])[0]
    finally:
        target.remove_rows([0])
    p = probs_from_logits(logits[0], params).double()
    nz = torch.nonzero(p).squeeze(1).tolist()
    return {(i,): float(p[i]) for i in nz}


def compare(plain: list[tuple], spec: list[tuple], exact_first: dict | None, alpha: float) -> dict:
    """Two-sample test on whole sequences, and one-sample test of the first token against exact p.

    The top-level numbers are the joint test's; `passed` requires both tests to pass.
    """
    joint: FitResult = two_sample(Counter(plain), Counter(spec), alpha=alpha)
    result = {**joint.as_dict(), "joint_passed": joint.passed, "distinct_sequences": len(set(spec))}
    if exact_first is not None:
        first = one_sample(Counter(s[:1] for s in spec), exact_first, alpha=alpha)
        result["first_token_exact"] = first.as_dict()
        result["passed"] = joint.passed and first.passed
    return result
