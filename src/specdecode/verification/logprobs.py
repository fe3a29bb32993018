"""Log-probabilities of emitted tokens, from the target's verify pass.

Every emitted token, drafted-and-accepted ones included, comes out of a verify pass whose logits
row at that position is the target's distribution there, so its log-probability is read from the
same pass that decided it: speculative and plain decoding report the same values (up to the
floating-point noise of scoring several positions at once).

Two distributions, chosen per request:
- raw (the default, as vLLM's `raw_logprobs`): log-softmax of the target model's logits, before
  any transform; what the model thinks, whatever the request's sampling settings;
- processed (vLLM's `processed_logprobs`): the distribution the token was sampled from, after
  penalties, logit bias, the grammar mask, temperature, top-k, top-p and min-p. Greedy requests
  (temperature 0) get the log-softmax of the penalised, masked logits: the distribution whose argmax
  they take. Tokens a transform excluded have log-probability -inf (reported as -9999.0, as vLLM
  does, since JSON has no infinity).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling.params import SamplingParams, probs_from_logits

MODES = ("raw", "processed")
MAX_TOP = 20  # OpenAI's limit for top_logprobs
FLOOR = -9999.0


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]  # the most likely tokens at this position, most likely first


def check_logprobs(top: int | None, mode: str) -> None:
    from ..sampling.params import InvalidParameter

    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP):
        raise InvalidParameter(f"top_logprobs must be an integer in [0, {MAX_TOP}], got {top!r}")
    if mode not in MODES:
        raise InvalidParameter(f"logprobs_mode must be one of {', '.join(MODES)}, got {mode!r}")


def logprob_rows(raw: torch.Tensor, shaped: torch.Tensor, params: SamplingParams, mode: str) -> torch.Tensor:
    """[n, V] log-probabilities of the rows, in the requested distribution."""
    if mode == "raw":
        return torch.log_softmax(raw.float(), -1)
    if params.greedy:
        return torch.log_softmax(shaped.float(), -1)
    return torch.log(probs_from_logits(shaped, params))


def pick(rows: torch.Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """TokenLogprob of tokens[j] under rows[j], with its top alternatives."""
    out = []
    if top:
        values, ids = rows[: len(tokens)].topk(top, dim=-1)
    for j, token in enumerate(tokens):
        alternatives = list(zip(ids[j].tolist(), map(_finite, values[j].tolist()))) if top else []
        out.append(TokenLogprob(token, _finite(float(rows[j, token])), alternatives))
    return out


def _finite(x: float) -> float:
    return x if x > FLOOR else FLOOR
