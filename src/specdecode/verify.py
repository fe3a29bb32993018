"""`specdecode verify`: sample many short continuations of one prompt with plain and speculative
decoding on real models, and test that their distributions agree.

Continuations are drawn in batches: all rows share the prompt's KV cache (prefilled once) and
then advance with their own positions (BatchRunner), each round drafting k tokens per row,
verifying them in one batched target pass and running the same rejection step as the engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .backends.hf_batch import BatchRunner
from .goodness import FitResult, one_sample, two_sample
from .naive import naive_rejection_sample
from .proposers.ngram import lookup
from .rejection import rejection_sample
from .sampling import SamplingParams, pad_vocab, probs_from_logits, sample_from


@dataclass
class Sampler:
    target: BatchRunner
    draft: BatchRunner | None = None
    ngram_max: int = 3
    ngram_min: int = 1


def sample_continuations(
    sampler: Sampler,
    prompt_ids: list[int],
    n: int,
    length: int,
    params: SamplingParams,
    k: int,
    proposer: str,
    generator: torch.Generator,
    naive: bool = False,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[int, ...]]:
    """n continuations of `length` tokens; proposer is none, draft or ngram."""
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        rows = min(batch_size, n - len(out))
        out.extend(_chunk(sampler, prompt_ids, rows, length, params, k if proposer != "none" else 0, proposer,
                          generator, naive_rejection_sample if naive else rejection_sample))
        if progress:
            progress(rows)
    return out


@torch.inference_mode()
def _chunk(sampler, prompt, rows, length, params, k, proposer, gen, reject) -> list[tuple[int, ...]]:
    target, draft = sampler.target, sampler.draft if proposer == "draft" else None
    target.start_shared(prompt[:-1], rows)
    if draft is not None:
        draft.start_shared(prompt[:-1], rows)
    out: list[list[int]] = [[] for _ in range(rows)]
    last = [prompt[-1]] * rows  # emitted but not yet fed to the target
    draft_pending = [[prompt[-1]] for _ in range(rows)]  # not yet fed to the draft
    while any(len(o) < length for o in out):
        active = [len(o) < length for o in out]
        drafts, q = _propose(sampler, draft, prompt, out, draft_pending, active, k, params, gen, proposer)
        logits, _ = target.forward([[last[b]] + drafts[b] if active[b] else [] for b in range(rows)])
        tokens = [None] * rows
        accepted = [0] * rows
        # Rows may hold different numbers of drafts (ngram); run the rejection step per group.
        for width in sorted({len(drafts[b]) for b in range(rows) if active[b]}):
            idx = [b for b in range(rows) if active[b] and len(drafts[b]) == width]
            p = probs_from_logits(logits[idx, : width + 1], params)
            d = torch.tensor([drafts[b] for b in idx], dtype=torch.long).reshape(len(idx), width)
            qg = None if q is None or width == 0 else q[idx, :width]
            toks, nacc = reject(d, qg, p, gen)
            for j, b in enumerate(idx):
                accepted[b] = int(nacc[j])
                tokens[b] = toks[j, : accepted[b] + 1].tolist()
        target.rollback([len(drafts[b]) - accepted[b] if active[b] else 0 for b in range(rows)])
        if draft is not None:
            # The draft processed its pending tokens and drafts 1..k-1; keep the accepted ones.
            draft.rollback([max(0, k - 1 - accepted[b]) if active[b] else 0 for b in range(rows)])
        for b in range(rows):
            if not active[b]:
                continue
            out[b].extend(tokens[b])
            last[b] = tokens[b][-1]
            draft_pending[b] = ([drafts[b][-1]] if accepted[b] == k and k else []) + [tokens[b][-1]]
    return [tuple(o[:length]) for o in out]


def _propose(sampler, draft, prompt, out, pending, active, k, params, gen, proposer):
    rows = len(out)
    if k == 0 or proposer == "none":
        return [[] for _ in range(rows)], None
    if proposer == "ngram":
        return [lookup(np.asarray(prompt + out[b]), k, sampler.ngram_max, sampler.ngram_min) if active[b] else []
                for b in range(rows)], None
    drafts: list[list[int]] = [[] for _ in range(rows)]
    qs = []
    feed = [pending[b] if active[b] else [] for b in range(rows)]
    for _ in range(k):
        logits, lengths = draft.forward(feed)
        last = logits[torch.arange(rows), (lengths - 1).clamp(min=0)]
        q = pad_vocab(probs_from_logits(last, params), sampler.target.vocab_size)
        tokens = q.argmax(-1) if params.greedy else sample_from(q, gen)
        qs.append(q)
        for b in range(rows):
            if active[b]:
                drafts[b].append(int(tokens[b]))
        feed = [[int(tokens[b])] if active[b] else [] for b in range(rows)]
    return drafts, (None if params.greedy else torch.stack(qs, 1))


@torch.inference_mode()
def first_token_probs(target: BatchRunner, prompt_ids: list[int], params: SamplingParams) -> dict[int, float]:
    """The target's exact distribution of the first new token, after the sampling transform."""
    target.start_shared(prompt_ids[:-1], 1)
    logits, _ = target.forward([[prompt_ids[-1]]])
    p = probs_from_logits(logits[0, 0], params).double()
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
