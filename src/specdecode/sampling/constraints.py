"""Transforms of the logits that depend on the text so far: penalties, logit bias and grammars.

Speculation stays exact under them only if the target's p and the draft's q at every drafted
position are shaped by the same rule from the same text: the context plus the drafts before that
position. So they are applied per position (`Row.shape`, engine/row.py), on the target side in the engine's
verify stage and on the draft side in the draft proposer, never to one side only.

Grammars go through llguidance (a Rust library behind a dependency-free wheel; vLLM, SGLang and
llama.cpp use it too): JSON schemas, regular expressions and Lark grammars, one matcher per request
that is advanced over drafts and rolled back when they are rejected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from .params import InvalidParameter, SamplingParams

GRAMMAR_KINDS = ("json", "regex", "grammar", "choice")
BITS = torch.arange(32, dtype=torch.int32)


# -- penalties and logit bias --------------------------------------------------------------------

class PenaltyCounts:
    """What the penalties of one request count: its generated tokens (presence and frequency, as
    OpenAI defines them) and every token of prompt and output (the repetition penalty, as in
    transformers and vLLM)."""

    def __init__(self, params: SamplingParams, prompt_ids: list[int], vocab: int):
        self.params = params
        self.counts = torch.zeros(vocab)
        self.seen = torch.zeros(vocab, dtype=torch.bool)
        self.seen[torch.tensor([t for t in prompt_ids if t < vocab], dtype=torch.long)] = True

    def push(self, token: int) -> None:
        if token < self.counts.numel():
            self.counts[token] += 1
            self.seen[token] = True

    def apply(self, logits: torch.Tensor, extra: list[int]) -> torch.Tensor:
        """logits [V'] (V' <= V: a draft's narrower vocabulary) after the text plus `extra`."""
        params = self.params
        width = logits.shape[-1]
        counts, seen = self.counts[:width], self.seen[:width]
        if extra:
            counts, seen = counts.clone(), seen.clone()
            for t in extra:
                if t < width:
                    counts[t] += 1
                    seen[t] = True
        if params.repetition_penalty != 1.0:
            r = params.repetition_penalty
            logits = torch.where(seen, torch.where(logits > 0, logits / r, logits * r), logits)
        if params.frequency_penalty:
            logits = logits - params.frequency_penalty * counts
        if params.presence_penalty:
            logits = logits - params.presence_penalty * (counts > 0).float()
        return logits


def apply_logit_bias(logits: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> torch.Tensor:
    ids = [t for t, _ in bias if t < logits.shape[-1]]
    if not ids:
        return logits
    logits = logits.clone()
    logits[torch.tensor(ids)] += torch.tensor([b for t, b in bias if t < logits.shape[-1]])
    return logits


# -- grammars --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GrammarSpec:
    """What the output must match. kind: json (a JSON schema, dict or string; {"type": "object"} for
    any object), regex, grammar (Lark syntax, as llguidance reads it) or choice (a list of strings)."""

    kind: str
    value: object

    def __post_init__(self) -> None:
        if self.kind not in GRAMMAR_KINDS:
            raise InvalidParameter(f"a grammar's kind is one of {', '.join(GRAMMAR_KINDS)}, got {self.kind!r}")

    def source(self) -> str:
        """The grammar as llguidance takes it."""
        from llguidance import LLMatcher

        value = self.value
        if self.kind == "json":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise InvalidParameter(f"the JSON schema is not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise InvalidParameter(f"a JSON schema is an object, got {type(value).__name__}")
            return LLMatcher.grammar_from_json_schema(json.dumps(value))
        if self.kind == "regex":
            if not isinstance(value, str) or not value:
                raise InvalidParameter("a regex constraint is a non-empty string")
            return LLMatcher.grammar_from_regex(value)
        if self.kind == "grammar":
            if not isinstance(value, str) or not value.strip():
                raise InvalidParameter("a grammar constraint is a non-empty Lark grammar")
            return LLMatcher.grammar_from_lark(value)
        if not isinstance(value, (list, tuple)) or not value or not all(isinstance(c, str) and c for c in value):
            raise InvalidParameter("a choice constraint is a non-empty list of non-empty strings")
        return LLMatcher.grammar_from_regex("|".join(_regex_literal(c) for c in value))


def _regex_literal(text: str) -> str:
    return "(" + "".join("\\" + ch if ch in r"\.^$|?*+()[]{}/-" else ch for ch in text) + ")"


class GrammarCompiler:
    """Builds matchers for one tokenizer (llguidance's view of the vocabulary is made once)."""

    def __init__(self, tokenizer, vocab: int, eos_id: int | None):
        try:
            import llguidance
            import llguidance.hf
        except ImportError:
            raise InvalidParameter("structured output needs llguidance: pip install 'llguidance>=1.9'") from None
        self.vocab = vocab
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=eos_id)
        self._matcher = llguidance.LLMatcher

    def check(self, spec: GrammarSpec) -> str:
        source = spec.source()
        error = self._matcher.validate_grammar(source, self.tokenizer)
        if error:
            raise InvalidParameter(f"the {spec.kind} constraint is invalid: {error.strip()}")
        return source

    def compile(self, spec: GrammarSpec) -> "Grammar":
        """The request's matcher (its grammar was checked at submission; a matcher in error says why)."""
        matcher = self._matcher(self.tokenizer, spec.source(), log_level=0)
        if matcher.is_error():
            raise InvalidParameter(f"the {spec.kind} constraint is invalid: {matcher.get_error()}")
        return Grammar(matcher, self.vocab)


class Grammar:
    """One request's matcher. It stands at the committed text plus `extra`, tokens it consumed
    tentatively (drafts); a query for another continuation rolls back to the common part first."""

    def __init__(self, matcher, vocab: int):
        import llguidance.torch

        self.matcher = matcher
        self.vocab = vocab
        self.extra: list[int] = []
        self._fill = llguidance.torch.fill_next_token_bitmask
        self._bitmask = llguidance.torch.allocate_token_bitmask(1, vocab)
        self._masks: dict[tuple[int, ...], torch.Tensor] = {}

    @property
    def stopped(self) -> bool:
        """The grammar is complete and allows nothing more (the request ends there)."""
        return self.matcher.is_stopped()

    def _goto(self, extra: list[int]) -> bool:
        """Stand at committed text + extra; False when extra leaves the grammar."""
        keep = 0
        while keep < min(len(extra), len(self.extra)) and extra[keep] == self.extra[keep]:
            keep += 1
        if len(self.extra) > keep:
            self.matcher.rollback(len(self.extra) - keep)
            del self.extra[keep:]
        rest = list(extra[keep:])
        if not rest:
            return True
        taken = self.matcher.try_consume_tokens(rest)
        self.extra.extend(rest[:taken])
        return taken == len(rest)

    def allowed(self, extra: list[int]) -> torch.Tensor:
        """Bool [vocab]: the tokens the grammar allows after the committed text + extra."""
        key = tuple(extra)
        if key not in self._masks:
            if not self._goto(list(extra)):
                # A forbidden draft before this position: it is rejected for sure, so this row is never
                # reached; anything finite keeps the batched arithmetic free of NaN.
                mask = torch.ones(self.vocab, dtype=torch.bool)
            else:
                self._fill(self.matcher, self._bitmask, 0)
                mask = ((self._bitmask[0].unsqueeze(1) >> BITS) & 1).flatten()[: self.vocab].bool()
            self._masks[key] = mask
        return self._masks[key]

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of these drafts the grammar allows in a row (the rest would be rejected for sure)."""
        self._goto([])
        taken = self.matcher.try_consume_tokens(list(tokens))
        self.extra.extend(tokens[:taken])
        return taken

    def commit(self, token: int) -> None:
        """The token is now part of the text."""
        self._goto([token])
        self.extra.clear()
        self._masks.clear()


def apply_mask(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """-inf where the grammar forbids a token; ids beyond the tokenizer's vocabulary are forbidden."""
    width = min(logits.shape[-1], allowed.numel())
    out = torch.full_like(logits, float("-inf"))
    out[..., :width] = logits[..., :width].masked_fill(~allowed[:width], float("-inf"))
    return out
