"""Toy "models": conditional probability tables over a small vocabulary, run through the real
rejection step round after round (each round feeding back what it emitted) until L tokens exist.

A table T[a, b] gives the logits of the next token after the two previous tokens (a, b); the
sequence starts with two BOS symbols (index V). Everything is vectorised over N independent rows.
"""

from __future__ import annotations

import itertools

import torch

from specdecode.verification.rejection import rejection_sample
from specdecode.sampling.params import SamplingParams, probs_from_logits


def random_table(V: int, seed: int, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((V + 1, V + 1, V), generator=g) * scale


def exact_joint(P: torch.Tensor, params: SamplingParams, L: int) -> dict[tuple, float]:
    V = P.shape[-1]
    probs = probs_from_logits(P, params).double()
    joint = {}
    for seq in itertools.product(range(V), repeat=L):
        a = b = V
        prob = 1.0
        for x in seq:
            prob *= float(probs[a, b, x])
            a, b = b, x
        if prob > 0:
            joint[seq] = prob
    return joint


def simulate(
    P: torch.Tensor,
    Q: torch.Tensor,
    k: int,
    n: int,
    L: int,
    seed: int,
    params: SamplingParams,
    deterministic: bool = False,
    rejection=rejection_sample,
    p_params: SamplingParams | None = None,
    bonus_from_draft: bool = False,
    min_confidence: float = 0.0,
    confidence_of_sample: bool = False,
) -> dict[tuple, int]:
    """Counts of the first L emitted tokens over n rows.

    p_params overrides the transform applied to the target (to build the one-sided-temperature
    control); bonus_from_draft replaces the target's bonus token with one more unverified draft
    (the forgotten-bonus control).
    """
    V = P.shape[-1]
    gen = torch.Generator().manual_seed(seed)
    p_params = p_params or params
    width = 2 + L + k + 1
    full = torch.full((n, width), V, dtype=torch.long)  # two BOS columns, then emitted tokens
    lens = torch.zeros(n, dtype=torch.long)
    while bool((lens < L).any()):
        rows = (lens < L).nonzero().squeeze(1)
        a = full[rows, lens[rows]]
        b = full[rows, lens[rows] + 1]
        drafts, qs = [], []
        da, db = a, b
        for _ in range(k + (1 if bonus_from_draft else 0)):
            q = probs_from_logits(Q[da, db], params)
            d = q.argmax(-1) if deterministic else torch.multinomial(q, 1, generator=gen).squeeze(1)
            drafts.append(d)
            qs.append(q)
            da, db = db, d
        extra = drafts.pop() if bonus_from_draft else None
        if bonus_from_draft:
            qs.pop()
        ps = []
        pa, pb = a, b
        for i in range(k + 1):
            ps.append(probs_from_logits(P[pa, pb], p_params))
            if i < k:
                pa, pb = pb, drafts[i]
        D = torch.stack(drafts, 1) if k else torch.zeros((len(rows), 0), dtype=torch.long)
        Qp = None if deterministic or not k else torch.stack(qs, 1)
        P_all = torch.stack(ps, 1)
        if min_confidence > 0 and k > 1:
            tokens, nacc = _ragged(D, Qp, P_all, qs, min_confidence, confidence_of_sample, rejection, gen)
        else:
            tokens, nacc = rejection(D, Qp, P_all, gen)
        if bonus_from_draft:
            all_in = nacc == k
            tokens[all_in, k] = extra[all_in]
        for j in range(k + 1):
            emit = j <= nacc
            r = rows[emit]
            full[r, 2 + lens[r]] = tokens[emit, j]
            lens[r] += 1
            # rows that already have enough tokens simply stop being active
    counts: dict[tuple, int] = {}
    for seq in full[:, 2 : 2 + L].tolist():
        counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
    return counts


def _ragged(D, Qp, P_all, qs, tau, of_sample, rejection, gen):
    """Each row keeps drafts while the stop rule allows, then one rejection call per length."""
    R, k = D.shape
    keep = torch.ones(R, dtype=torch.long)
    going = torch.ones(R, dtype=torch.bool)
    for j in range(1, k):
        if of_sample:  # WRONG: drops draft j because of its own sampled value
            ok = qs[j].gather(1, D[:, j : j + 1]).squeeze(1) >= tau
        else:  # right: draft j is made only if the draft was sure at position j - 1 (that draft is kept)
            ok = qs[j - 1].max(1).values >= tau
        going &= ok
        keep += going.long()
    tokens = torch.full((R, k + 1), -1, dtype=torch.long)
    nacc = torch.zeros(R, dtype=torch.long)
    for n in keep.unique().tolist():
        idx = (keep == n).nonzero().squeeze(1)
        q = None if Qp is None else Qp[idx, :n]
        t, a = rejection(D[idx, :n], q, P_all[idx, : n + 1], gen)
        tokens[idx, : n + 1] = t
        nacc[idx] = a
    return tokens, nacc
