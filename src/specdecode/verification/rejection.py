"""The exact speculative-sampling rejection step (Leviathan et al. 2023; Chen et al. 2023).

For drafts x_1..x_k with proposal distributions q_i and target distributions p_i:
accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order, stopping at the first rejection;
at the first rejected position emit one token from normalize(max(0, p_i - q_i)); when all k are
accepted emit a bonus token from p_{k+1}. Deterministic proposals (draft_probs None) have one-hot q.
Greedy decoding is the same rule with one-hot p. The emitted tokens follow p exactly.
"""

from __future__ import annotations

import torch

from .draws import Generators, check_shapes, sample_rows, uniform


def rejection_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: Generators = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched rejection step.

    draft_tokens: LongTensor [B, k] (k may be 0: plain decoding).
    draft_probs:  FloatTensor [B, k, V] (the distributions the drafts were sampled from), or None for
                  deterministic proposals.
    target_probs: FloatTensor [B, k+1, V], after the same sampling transform as draft_probs.
    generator:    one torch.Generator for the batch, or a sequence with one per row so that a seeded
                  row's draws do not depend on the other rows.
    Returns (tokens [B, k+1] right-padded with -1, num_accepted [B]); row b holds num_accepted[b]
    accepted drafts followed by exactly one residual or bonus token.
    """
    B, k = draft_tokens.shape
    check_shapes(draft_tokens, draft_probs, target_probs)
    device = target_probs.device
    p = target_probs.float()
    draft_tokens = draft_tokens.long()
    if k == 0:  # plain decoding: one token from p, with no copies of the vocabulary rows
        return sample_rows(p[:, 0], generator).reshape(B, 1), torch.zeros(B, dtype=torch.long, device=device)

    p_x = p[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).double()
    if draft_probs is None:
        q_x = torch.ones_like(p_x)
    else:
        q_x = draft_probs.float().gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).double()
    u = uniform((B, k), generator, device)
    # u < p/q written without the division: q(x) = 0 with p(x) > 0 always accepts (ratio +inf),
    # p(x) = 0 never does.
    accepted = u * q_x < p_x
    num_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)

    rows = torch.arange(B, device=device)
    p_next = p[rows, num_accepted]  # [B, V]: p at the first rejection, or p_{k+1} for the bonus
    rejected = num_accepted < k
    at = num_accepted.clamp(max=k - 1)
    if draft_probs is None:
        q_next = torch.zeros_like(p_next)
        q_next[rows, draft_tokens[rows, at]] = 1.0
    else:
        q_next = draft_probs.float()[rows, at]
    residual = (p_next - q_next).clamp_(min=0.0)
    # Rejection implies p(x) < q(x), so p - q has positive mass elsewhere; a residual that is
    # all zero can only come from rounding, and p itself is then the right fallback.
    empty = residual.sum(-1) <= 0
    residual = torch.where(empty.unsqueeze(-1), p_next, residual)
    weights = torch.where(rejected.unsqueeze(-1), residual, p_next)
    last = sample_rows(weights, generator)

    tokens = torch.full((B, k + 1), -1, dtype=torch.long, device=device)
    keep = torch.arange(k, device=device).unsqueeze(0) < num_accepted.unsqueeze(1)
    tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows, num_accepted] = last
    return tokens, num_accepted
