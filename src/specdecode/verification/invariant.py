"""Drafter-invariant speculative sampling (Daliri, Musco and Suresh, 2024): a seed means the same tokens.

Gumbel-max sampling draws the token at absolute position t as argmax(log p_t + g_t), with g_t
Gumbel noise over the vocabulary. With g = -log E, E ~ Exp(1), that is the exponential race
argmax(p_t / E_t), which picks the same token without a logarithm of p or of E: the race is what
runs. Here E_t comes from a generator keyed by (seed, t) alone, so plain decoding, the draft model and
verification all see the same E_t at the same position, whatever the batch, the proposer or k:
- the draft model drafts argmax(q_t / E_t) (a lookup drafts whatever it likes);
- verification accepts a draft iff it equals the target's argmax(p_t / E_t), and emits that
  argmax at the first mismatch (or as the bonus token) (verifier.InvariantVerifier).
Every emitted token is therefore the plain Gumbel-max token of its position: exactly distributed as
p_t (the Gumbel-max trick), and the same sequence plain decoding with that seed produces. For a
deterministic draft x the chance of acceptance is p_t(x), as with the standard rule; a sampled draft
is accepted somewhat less often ((1 - TV)/(1 + TV) at least, against 1 - TV).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling.params import race_noise


_MASK = (1 << 64) - 1


def position_seed(seed: int, position: int) -> int:
    """A 64-bit key for (seed, position): splitmix64 of the pair, so that neighbouring positions and
    seeds get unrelated streams."""
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def exponentials(seed: int, position: int, width: int) -> torch.Tensor:
    """The race's Exp(1) noise [width] (float64, -log of uniforms in [0, 1): never 0) for one position
    of one seeded sequence."""
    return race_noise(width, torch.Generator().manual_seed(position_seed(seed, position)))


@dataclass(frozen=True)
class RaceNoise:
    """One position's race noise: E (float64, `exponentials`) and 1/E rounded to float32, with which a
    race over the whole vocabulary runs in float32 before float64 settles the few leaders."""

    exp: torch.Tensor
    inv: torch.Tensor

    @classmethod
    def of(cls, exp: torch.Tensor) -> "RaceNoise":
        return cls(exp, exp.reciprocal().float())


# The float32 race's values are within 3 roundings (about 2e-7) of the exact p / E, so the float64
# winner is always among the values within this fraction of the float32 leader (near-zero values cannot
# lead: the largest p is at least 1 / V).
_LEADERS = 1e-5


def race_argmax(probs: torch.Tensor, noise: RaceNoise) -> int:
    """argmax(probs / E) over one distribution, the Gumbel-max token, as float64 decides it (the first
    index among exact ties); tokens of probability 0 are never chosen. The race runs in float32 over
    the vocabulary and in float64 over its leaders only: a division and an argmax in float64 over
    150k tokens cost a CPU about 0.4 ms, more than twice the two-stage race."""
    width = probs.shape[-1]
    quick = probs.float() * noise.inv[:width]
    leaders = (quick >= quick.max() * (1 - _LEADERS)).nonzero().flatten()
    if leaders.numel() == 1:
        return int(leaders[0])
    if leaders.numel() == 0:  # a NaN leads: every token is raced in float64, as it always was
        leaders = torch.arange(width)
    exact = probs[leaders].double() / noise.exp[leaders]
    return int(leaders[exact.argmax()])
