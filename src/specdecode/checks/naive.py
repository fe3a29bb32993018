"""The wrong algorithm, kept on purpose so checks can show they catch it.

Same acceptance rule as rejection_sample, but on rejection it samples from p instead of the
residual normalize(max(0, p - q)). Tokens the draft over-proposes then come out too often: the
output no longer follows p. `specdecode verify --naive` and the negative controls use it; for a tree
walk (verification/tree.py) the same mistake is naive_tree_residual.
"""

from __future__ import annotations

import torch

from ..verification.draws import Generators, per_row_generators, sample_rows
from ..verification.rejection import rejection_sample


def naive_rejection_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: Generators = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    B, k = draft_tokens.shape
    # Accept exactly as the right algorithm does, then overwrite each rejected row's token.
    tokens, num_accepted = rejection_sample(draft_tokens, draft_probs, target_probs, generator)
    rejected = (num_accepted < k).nonzero().squeeze(1)
    if rejected.numel():
        at = num_accepted[rejected]
        gens = per_row_generators(generator, B)
        row_gens = generator if gens is None else [gens[int(r)] for r in rejected]
        tokens[rejected, at] = sample_rows(target_probs[rejected, at].float(), row_gens)
    return tokens, num_accepted


def naive_tree_residual(r: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """After a rejected candidate, the next one is tried against p again instead of the residual."""
    return p
