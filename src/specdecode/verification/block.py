"""Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025).

Token-by-token verification stops at the first rejection and judges each draft alone. Block
verification judges the drafted block jointly and is never worse in expected accepted tokens (and
optimal among rules that see only the drafted path), while the output stays exactly the target's.

For drafts x_1..x_k with proposal distributions q_i and target distributions p_i (p_{k+1} the bonus
position's), with w_0 = 1:
    w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i))                       (the block's running weight)
    h_i = m_i / (m_i + 1 - w_i),  m_i = sum_x max(0, w_i p_{i+1}(x) - q_{i+1}(x))   for i < k
    h_k = w_k
Draw eta_1..eta_k ~ U(0, 1) and keep tau = the largest i with eta_i < h_i (0 if none): drafts
x_1..x_tau are accepted, even where a token-level test would have stopped earlier. Then one token is
drawn from p_{k+1} if tau = k, else from normalize(max(0, w_tau p_{tau+1} - q_{tau+1})): the
residual is weighted by the block's weight, not the plain max(0, p - q). (vllm-ascend once used the
weights with the plain residual; tests/test_block.py keeps that rule as a negative control.)
"""

from __future__ import annotations

import torch

from .draws import Generators, check_shapes, sample_rows, uniform


def block_rejection_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: Generators = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same shapes, padding and return values as rejection.rejection_sample:
    (tokens [B, k+1] right-padded with -1, num_accepted [B])."""
    B, k = draft_tokens.shape
    check_shapes(draft_tokens, draft_probs, target_probs)
    device = target_probs.device
    p = target_probs.double()
    draft_tokens = draft_tokens.long()
    rows = torch.arange(B, device=device)
    if draft_probs is None:  # deterministic drafts: q is one-hot on each token
        q = torch.zeros((B, k, p.shape[-1]), dtype=torch.float64, device=device)
        if k:
            q.scatter_(-1, draft_tokens.unsqueeze(-1), 1.0)
    else:
        q = draft_probs.double()

    weight = torch.ones((B, k + 1), dtype=torch.float64, device=device)  # w_0 .. w_k
    if k:
        p_x = p[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
        q_x = q.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
        # p/q with q(x) = 0 < p(x) as +inf (the weight saturates at 1) and p(x) = 0 as 0.
        ratio = torch.where(q_x > 0, p_x / q_x.clamp(min=1e-300), torch.where(p_x > 0, torch.inf, 0.0))
        for i in range(k):
            weight[:, i + 1] = torch.minimum(weight[:, i] * ratio[:, i], torch.ones_like(ratio[:, i]))

    tau = torch.zeros(B, dtype=torch.long, device=device)
    if k:
        w = weight[:, 1:]  # w_1 .. w_k
        mass = (w[:, : k - 1, None] * p[:, 1:k] - q[:, 1:k]).clamp(min=0).sum(-1)  # m_1 .. m_{k-1}
        denom = mass + 1 - w[:, : k - 1]
        # w_i = 1 with no residual mass: accepting cannot be wrong (the limit of m / m).
        h = torch.where(denom > 0, mass / denom.clamp(min=1e-300), torch.ones_like(mass))
        h = torch.cat([h, w[:, k - 1 :]], dim=1)  # h_k = w_k
        eta = uniform((B, k), generator, device)
        passed = eta < h
        positions = torch.arange(1, k + 1, device=device).expand(B, k)
        tau = torch.where(passed, positions, torch.zeros_like(positions)).max(dim=1).values

    p_next = p[rows, tau]  # p_{tau+1}
    if k:
        q_next = q[rows, tau.clamp(max=k - 1)]
        residual = (weight[rows, tau].unsqueeze(-1) * p_next - q_next).clamp(min=0)
        # A residual that is all zero can only come from rounding; p itself is then the fallback.
        residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_next)
        weights = torch.where((tau < k).unsqueeze(-1), residual, p_next)
    else:
        weights = p_next
    last = sample_rows(weights, generator)

    tokens = torch.full((B, k + 1), -1, dtype=torch.long, device=device)
    if k:
        keep = torch.arange(k, device=device).unsqueeze(0) < tau.unsqueeze(1)
        tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows, tau] = last
    return tokens, tau
