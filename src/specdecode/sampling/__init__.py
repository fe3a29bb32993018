"""The sampling transform applied identically to p and q: temperature, top-k/p, min-p (params), and
penalties, logit bias and grammars (constraints)."""

from .params import SAMPLERS, InvalidParameter, SamplingParams, pad_vocab, probs_from_logits, sample_from

__all__ = ["SAMPLERS", "InvalidParameter", "SamplingParams", "pad_vocab", "probs_from_logits", "sample_from"]
