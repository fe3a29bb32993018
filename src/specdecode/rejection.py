"""The exact speculative-sampling rejection step (Leviathan et al. 2023; Chen et al. 2023).

For drafts x_1..x_k with proposal distributions q_i and target distributions p_i:
accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order, stopping at the first rejection;
at the first rejected position emit one token from normalize(max(0, p_i - q_i)); when all k are
accepted emit a bonus token from p_{k+1}. Deterministic proposals (draft_probs None) have one-hot q.
Greedy decoding is the same rule with one-hot p. The emitted tokens follow p exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .sampling import sample_from

Generators = torch.Generator | Sequence[torch.Generator | None] | None


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
    _check_shapes(draft_tokens, draft_probs, target_probs)
    device = target_probs.device
    p = target_probs.float()
    draft_tokens = draft_tokens.long()

    if k > 0:
        p_x = p[:, :k].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).double()
        if draft_probs is None:
            q_x = torch.ones_like(p_x)
        else:
            q_x = draft_probs.float().gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1).double()
        u = _uniform((B, k), generator, device)
        # u < p/q written without the division: q(x) = 0 with p(x) > 0 always accepts (ratio +inf),
        # p(x) = 0 never does.
        accepted = u * q_x < p_x
        num_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)
    else:
        num_accepted = torch.zeros(B, dtype=torch.long, device=device)

    rows = torch.arange(B, device=device)
    p_next = p[rows, num_accepted]  # [B, V]: p at the first rejection, or p_{k+1} for the bonus
    if k > 0:
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
    else:
        weights = p_next
    last = sample_rows(weights, generator)

    tokens = torch.full((B, k + 1), -1, dtype=torch.long, device=device)
    if k > 0:
        keep = torch.arange(k, device=device).unsqueeze(0) < num_accepted.unsqueeze(1)
        tokens[:, :k] = torch.where(keep, draft_tokens, tokens[:, :k])
    tokens[rows, num_accepted] = last
    return tokens, num_accepted


def _check_shapes(draft_tokens, draft_probs, target_probs) -> None:
    if draft_tokens.dim() != 2:
        raise ValueError(f"draft_tokens must be [B, k], got shape {tuple(draft_tokens.shape)}")
    B, k = draft_tokens.shape
    if target_probs.dim() != 3 or target_probs.shape[0] != B or target_probs.shape[1] != k + 1:
        raise ValueError(f"target_probs must be [B, k+1, V] = [{B}, {k + 1}, V], got {tuple(target_probs.shape)}")
    if draft_probs is not None and tuple(draft_probs.shape) != (B, k, target_probs.shape[2]):
        raise ValueError(
            f"draft_probs must be [B, k, V] = [{B}, {k}, {target_probs.shape[2]}], got {tuple(draft_probs.shape)}"
        )


def per_row_generators(generator: Generators, B: int) -> list | None:
    """The per-row generators, or None when one generator (or none) serves the whole batch."""
    if generator is None or isinstance(generator, torch.Generator):
        return None
    gens = list(generator)
    if len(gens) != B:
        raise ValueError(f"expected one generator per row ({B}), got {len(gens)}")
    return gens


def _uniform(shape, generator: Generators, device) -> torch.Tensor:
    # float64: float32 uniforms come on a 2^-24 grid that includes 0, which biases acceptance of
    # tokens with tiny p/q.
    gens = per_row_generators(generator, shape[0])
    if gens is None:
        return torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
    return torch.stack([torch.rand(shape[1:], dtype=torch.float64, generator=g, device=device) for g in gens])


def sample_rows(weights: torch.Tensor, generator: Generators) -> torch.Tensor:
    """One token per row of weights [B, V]; with one generator per row, row b draws from its own."""
    gens = per_row_generators(generator, weights.shape[0])
    if gens is None:
        return sample_from(weights, generator)
    return torch.stack([sample_from(weights[b], g) for b, g in enumerate(gens)])


def __getattr__(name: str):
    # block_rejection_sample lives in block.py (which builds on this module) and is public here too,
    # beside rejection_sample, with the same shapes.
    if name == "block_rejection_sample":
        from .block import block_rejection_sample

        return block_rejection_sample
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
