"""The random draws every rejection rule shares: shape checks, float64 uniforms and one token per row,
each from the row's own generator when the batch gives one per row (so a seeded request draws the
same numbers alone and in a batch)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..sampling.params import sample_from

Generators = torch.Generator | Sequence[torch.Generator | None] | None


def check_shapes(draft_tokens, draft_probs, target_probs) -> None:
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


def uniform(shape, generator: Generators, device) -> torch.Tensor:
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


def uniform_scalar(generator: torch.Generator | None) -> float:
    """One float64 uniform, for rules that walk a tree node by node."""
    return float(torch.rand((), dtype=torch.float64, generator=generator))
