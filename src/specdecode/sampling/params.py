"""Sampling parameters and the one function that turns logits into probabilities.

The same `probs_from_logits` produces the target's p and the draft's q. Exactness of speculative
sampling depends on that: if a transform (temperature, top-k, top-p, min-p) were applied to one side
only, the accepted tokens would follow a different distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import torch


SAMPLERS = (None, "standard", "invariant")


class InvalidParameter(ValueError):
    """A sampling or request parameter is outside its valid range."""


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    # "standard": the rejection rule with the request's own generator; "invariant": Gumbel-max with
    # noise keyed by (seed, position), so the tokens do not depend on the proposer, k or the batch
    # (verification/invariant.py). None: invariant for seeded requests and deterministic proposers, else standard.
    sampler: str | None = None
    # Penalties on what came before (constraints.PenaltyCounts), applied to the target's and the
    # draft's logits alike at every drafted position: presence and frequency over the generated
    # tokens (OpenAI's definition), repetition over prompt and output (transformers' and vLLM's).
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # 1 = off; > 1 discourages repeats
    logit_bias: tuple[tuple[int, float], ...] = field(default_factory=tuple)  # (token id, added to its logit)

    def __post_init__(self) -> None:
        # Lists are accepted for convenience and frozen into tuples so params stay hashable.
        object.__setattr__(self, "stop", _as_tuple(self.stop, str, "stop"))
        object.__setattr__(self, "stop_token_ids", _as_tuple(self.stop_token_ids, int, "stop_token_ids"))
        _check(
            isinstance(self.max_new_tokens, int) and not isinstance(self.max_new_tokens, bool)
            and self.max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}",
        )
        _check(
            _is_number(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0,
            f"temperature must be a finite number >= 0 (0 means greedy), got {self.temperature!r}",
        )
        _check(
            isinstance(self.top_k, int) and not isinstance(self.top_k, bool) and self.top_k >= 0,
            f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}",
        )
        _check(
            _is_number(self.top_p) and 0 < self.top_p <= 1,
            f"top_p must be in (0, 1] (1 disables it), got {self.top_p!r}",
        )
        _check(
            _is_number(self.min_p) and 0 <= self.min_p <= 1,
            f"min_p must be in [0, 1] (0 disables it), got {self.min_p!r}",
        )
        _check(
            self.seed is None or (isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0),
            f"seed must be a non-negative integer or None, got {self.seed!r}",
        )
        _check(self.sampler in SAMPLERS, f"sampler must be one of {', '.join(str(x) for x in SAMPLERS)}, "
                                         f"got {self.sampler!r}")
        _check(all(s for s in self.stop), "stop strings must be non-empty")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(_is_number(value) and -2 <= value <= 2, f"{name} must be a number in [-2, 2], got {value!r}")
        _check(_is_number(self.repetition_penalty) and math.isfinite(self.repetition_penalty)
               and self.repetition_penalty > 0,
               f"repetition_penalty must be a finite number > 0 (1 disables it), got {self.repetition_penalty!r}")
        bias = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
        try:
            bias = tuple(sorted((int(t), float(b)) for t, b in bias))
        except (TypeError, ValueError):
            raise InvalidParameter(f"logit_bias maps token ids to numbers, got {self.logit_bias!r}") from None
        _check(all(t >= 0 and -100 <= b <= 100 for t, b in bias),
               "logit_bias maps token ids >= 0 to biases in [-100, 100]")
        object.__setattr__(self, "logit_bias", bias)
        _check(all(t >= 0 for t in self.stop_token_ids), "stop_token_ids must be non-negative token ids")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalised(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)

    def replace(self, **changes) -> "SamplingParams":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return SamplingParams(**values)

    def make_generator(self, device: torch.device | str = "cpu") -> torch.Generator:
        """A generator private to one request, so a seeded request reproduces whatever runs beside it."""
        gen = torch.Generator(device=device)
        if self.seed is None:
            gen.seed()
        else:
            gen.manual_seed(self.seed)
        return gen


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidParameter(message)


def _as_tuple(value, kind, name) -> tuple:
    if value is None:
        return ()
    if isinstance(value, kind):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise InvalidParameter(f"{name} must be a list of {kind.__name__}, got {value!r}") from None
    for item in items:
        if not isinstance(item, kind) or isinstance(item, bool):
            raise InvalidParameter(f"{name} must be a list of {kind.__name__}, got item {item!r}")
    return items


def argmax_ids(logits: torch.Tensor) -> list[int]:
    """The index of each row's largest value over the last axis (the first on ties, as
    torch.argmax). A CPU float32 row goes through numpy, whose argmax over a 151k vocabulary takes
    a few microseconds where torch's takes a few hundred: greedy decoding does this every pass."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        return logits.detach().numpy().argmax(-1).reshape(-1).tolist()
    return logits.argmax(-1).reshape(-1).tolist()


def probs_from_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits [..., V] -> float32 probabilities [..., V] after the request's sampling transform.

    Order: temperature, then top-k, top-p and min-p, each on the distribution left by the previous
    one. Greedy (temperature 0) is the one-hot distribution on the argmax, which makes greedy
    speculative decoding the same rejection rule as sampling.
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    if params.temperature != 1.0:
        logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
        drop_sorted = mass_before >= params.top_p
        # A top_p below float32's smallest value rounds to 0 here, and 0 >= 0 would drop the first too.
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if params.min_p > 0.0:
        floor = params.min_p * probs.amax(-1, keepdim=True)
        probs = probs.masked_fill(probs < floor, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def pad_vocab(probs: torch.Tensor, width: int) -> torch.Tensor:
    """A draft whose vocabulary is a prefix of the target's gives zero mass to the rest."""
    if probs.shape[-1] == width:
        return probs
    return torch.nn.functional.pad(probs, (0, width - probs.shape[-1]))


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample one token per row of probs [..., V] (need not be normalised) by inverting its CDF.

    With c the float64 running sum of w and u uniform in [0, c_V), the first i with c_i > u is
    drawn with probability w_i / sum(w): a zero weight leaves an empty interval, so it is never
    drawn, and no normalisation is needed, which matters for the residual max(0, p - q) whose sum
    can be tiny. One uniform per row, where a race over the row would draw a vocabulary of them
    (docs/performance.md). Rows that are all point masses (greedy decoding's p, a residual left with
    one token) have a known winner: their argmax, with nothing drawn.
    """
    cdf = torch.cumsum(probs, -1, dtype=torch.float64)
    # A row whose total is its largest weight holds all its mass in one token (exactly so for a point
    # mass, whose other terms are zeros; else to float64 rounding, as the intervals below are). Two
    # passes over the vocabulary in all: this runs once a token.
    top, winner = probs.max(-1)
    if bool((top.double() == cdf[..., -1]).all()):
        return winner
    u = torch.rand((*cdf.shape[:-1], 1), dtype=torch.float64, device=cdf.device, generator=generator)
    index = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    overflow = index >= cdf.shape[-1]
    if bool(overflow.any()):  # u * total rounded up to total: the last token that has weight
        last = cdf.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1)
        index = torch.where(overflow, last, index)
    return index


def race_noise(shape, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Exp(1) noise for the exponential race: -log of float64 uniforms in [0, 1), so never 0."""
    return torch.rand(shape, dtype=torch.float64, device=device, generator=generator).log_().neg_()
