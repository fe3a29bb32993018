"""The wrong algorithm, kept on purpose so checks can show they catch it.

Same acceptance rule as rejection_sample, but on rejection it samples from p instead of the
residual normalize(max(0, p - q)). Tokens the draft over-proposes then come out too often: the
output no longer follows p. `specdecode verify --naive` and the negative controls use it.
"""

from __future__ import annotations

import torch

from .rejection import Generators, rejection_sample
from .sampling import sample_from


def naive_rejection_sample(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: Generators = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    B, k = draft_tokens.shape
    if k == 0:
        return rejection_sample(draft_tokens, draft_probs, target_probs, generator)
    # Accept exactly as the right algorithm does, then overwrite each rejected row's token.
    tokens, num_accepted = rejection_sample(draft_tokens, draft_probs, target_probs, generator)
    rejected = num_accepted < k
    if bool(rejected.any()):
        rows = torch.arange(B)[rejected]
        at = num_accepted[rejected]
        p_at = target_probs[rows, at].float()
        gens = None if generator is None or isinstance(generator, torch.Generator) else list(generator)
        if gens is None:
            tokens[rows, at] = sample_from(p_at, generator)
        else:
            tokens[rows, at] = torch.stack([sample_from(p_at[i], gens[int(r)]) for i, r in enumerate(rows)])
    return tokens, num_accepted
