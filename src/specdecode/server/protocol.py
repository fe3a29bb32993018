"""The OpenAI request bodies we accept, and how they become engine Requests.

Fields that would change the output and are not implemented (REFUSED, echo) are refused with a 400
that names them, never silently dropped; other unknown fields, which change nothing a client gets
(user, metadata, ...), are accepted. Honoured beyond the basics: n, logprobs / top_logprobs,
presence / frequency / repetition penalties, logit_bias, response_format (json_object,
json_schema) and, as in vLLM, guided_json / guided_regex / guided_choice / guided_grammar or
structured_outputs {json, regex, choice, grammar}. Extensions, as in vLLM: top_k, min_p,
ignore_eos, stop_token_ids, logprobs_mode, and `speculative: {"proposer": ..., "k": ...}` to
override the server's proposer and k for one request.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..sampling.constraints import GrammarSpec
from ..verification.logprobs import MAX_TOP
from ..sampling.params import InvalidParameter, SamplingParams

MAX_N = 16  # choices per request (each is a row of the batch)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid")
    proposer: Literal["draft", "ngram", "suffix", "hybrid", "hybrid-suffix", "none"] | None = None
    k: int | Literal["auto"] | None = None
    verifier: Literal["token", "block"] = "token"
    tree: int = 0  # node budget per pass for tree drafting (0: a chain); out of [0, 64] is a 400


# OpenAI, vLLM and SGLang request fields that change what a client gets, which this server does not
# implement: a request that sets one is refused (400 naming the field), never answered as if it had
# not (docs/serving.md lists every field and what happens to it). Fields that change nothing of the
# output (user, metadata, store, service_tier, parallel_tool_calls without tools, ...) are accepted.
REFUSED = ("tools", "tool_choice", "functions", "function_call", "prompt_logprobs", "length_penalty", "best_of",
           "use_beam_search", "suffix", "min_tokens", "bad_words", "allowed_token_ids", "prediction", "modalities",
           "audio", "logits_processors", "guided_decoding_backend", "guided_whitespace_pattern")
# vLLM's guided_* fields and structured_outputs keys, as constraints.GrammarSpec kinds.
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


class CommonRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # kept, so that unsupported() can see them
    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    logprobs: Any = None
    top_logprobs: int | None = None
    logprobs_mode: Literal["raw", "processed"] | None = None  # None: the server's --logprobs-mode
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    response_format: dict | None = None
    structured_outputs: dict | None = None
    speculative: Speculative | None = None
    # "standard" | "invariant" (drafter-invariant sampling); default: invariant when seeded.
    sampler: Literal["standard", "invariant"] | None = None
    user: str | None = None  # OpenAI's end-user id: the suffix memory's tenant under --suffix-scope client

    def unsupported(self) -> str | None:
        for name in REFUSED:
            value = (self.model_extra or {}).get(name)
            if value not in (None, False, 0, "", [], {}) and not (name == "tool_choice" and value == "none"):
                hint = " (for output in a function's argument shape, send its JSON schema as response_format " \
                       "json_schema)" if name in ("tools", "tool_choice", "functions", "function_call") else ""
                return f"{name} is not supported by this server; it would change the output, so the request is " \
                       f"refused rather than answered without it (see docs/serving.md){hint}"
        if not isinstance(self.n, int) or not 1 <= self.n <= MAX_N:
            return f"n must be an integer in [1, {MAX_N}] (choices per request), got {self.n!r}"
        return None

    def top(self) -> int | None:
        """How many alternatives per token to report (None: no logprobs at all)."""
        raise NotImplementedError

    def sampling(self, max_new_tokens: int, choice: int = 0) -> SamplingParams:
        """The sampling params of choice `choice`: a seeded request's i-th choice uses seed + i."""
        top_k = self.top_k if self.top_k is not None and self.top_k > 0 else 0  # -1 / 0 = off, as in vLLM
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        try:
            bias = {int(t): b for t, b in (self.logit_bias or {}).items()}
        except ValueError:
            raise InvalidParameter("logit_bias maps token ids (as strings of digits) to biases in [-100, 100], got "
                                   f"{self.logit_bias!r}") from None
        return SamplingParams(max_new_tokens=max_new_tokens, temperature=self.temperature, top_k=top_k,
                              top_p=self.top_p, min_p=self.min_p, seed=None if self.seed is None else self.seed + choice,
                              stop=stop, stop_token_ids=list(self.stop_token_ids or []), ignore_eos=self.ignore_eos,
                              sampler=self.sampler, presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, repetition_penalty=self.repetition_penalty,
                              logit_bias=bias)

    def grammar(self) -> GrammarSpec | None:
        """The one constraint the request sets, from response_format, guided_* or structured_outputs."""
        found: list[tuple[str, GrammarSpec]] = []
        rf = self.response_format
        if rf is not None:
            kind = rf.get("type") if isinstance(rf, dict) else None
            if kind == "json_object":
                found.append(("response_format", GrammarSpec("json", {"type": "object"})))
            elif kind == "json_schema":
                spec = rf.get("json_schema")
                schema = spec.get("schema", spec.get("json_schema")) if isinstance(spec, dict) else None
                if not isinstance(schema, dict):
                    raise InvalidParameter("response_format.json_schema.schema must be a JSON schema object")
                found.append(("response_format", GrammarSpec("json", schema)))
            elif kind != "text":
                raise InvalidParameter(f"response_format.type must be text, json_object or json_schema, got {kind!r}")
        extra = self.model_extra or {}
        for name, kind in GUIDED.items():
            if extra.get(name) not in (None, "", [], {}):
                found.append((name, GrammarSpec(kind, extra[name])))
        if self.structured_outputs:
            keys = [k for k in ("json", "regex", "choice", "grammar") if self.structured_outputs.get(k) is not None]
            other = sorted(set(self.structured_outputs) - {"json", "regex", "choice", "grammar"})
            if other:
                raise InvalidParameter(f"structured_outputs.{other[0]} is not supported: set one of json, regex, "
                                       "choice, grammar")
            found.extend((f"structured_outputs.{k}", GrammarSpec(k, self.structured_outputs[k])) for k in keys)
        if len(found) > 1:
            raise InvalidParameter(f"{found[0][0]} and {found[1][0]} both constrain the output: set only one")
        return found[0][1] if found else None


class CompletionRequest(CommonRequest):
    prompt: str | list[int] | list[str]
    echo: bool = False

    def top(self) -> int | None:
        """The legacy API: logprobs is the number of alternatives (0: the chosen token's only)."""
        lp = self.logprobs
        if lp is None or lp is False:
            return None
        if lp is True:
            return 0
        if not isinstance(lp, int) or not 0 <= lp <= MAX_TOP:
            raise InvalidParameter(f"logprobs must be an integer in [0, {MAX_TOP}], got {lp!r}")
        return lp

    def unsupported(self) -> str | None:
        if self.echo:
            return "echo is not supported"
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) and len(self.prompt) > 1:
            return "one prompt per request: send a string (or a list of token ids)"
        return super().unsupported()


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            parts = []
            for part in self.content:
                if part.get("type") != "text":
                    raise InvalidParameter(f"message content of type {part.get('type')!r} is not supported: "
                                           "send text parts only")
                parts.append(str(part.get("text", "")))
            return "".join(parts)
        return self.content or ""


class ChatRequest(CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None

    def top(self) -> int | None:
        """The chat API: logprobs is a switch, top_logprobs the number of alternatives."""
        if self.logprobs not in (None, False, True):
            raise InvalidParameter(f"logprobs must be true or false, got {self.logprobs!r}")
        top = self.top_logprobs
        if top is not None and (not 0 <= top <= MAX_TOP):
            raise InvalidParameter(f"top_logprobs must be in [0, {MAX_TOP}], got {top}")
        if not self.logprobs:
            if top:
                raise InvalidParameter("top_logprobs needs logprobs: true")
            return None
        return top or 0
