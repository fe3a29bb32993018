"""The OpenAI request bodies we accept, and how they become engine Requests.

Fields that would change the output and are not implemented (REFUSED, echo; AS_SERVED unless they
hold the value this server behaves as) are refused with a 400 that names them, never silently
dropped; other unknown fields, which change nothing a client gets (user, metadata, ...), are
accepted. Honoured beyond the basics: n, logprobs / top_logprobs, presence / frequency / repetition
penalties, logit_bias, response_format (json_object, json_schema) and, as in vLLM, guided_json /
guided_regex / guided_choice / guided_grammar or structured_outputs {json, regex, choice, grammar}.
Extensions, as in vLLM: top_k, min_p, ignore_eos, stop_token_ids, logprobs_mode, and
`speculative: {"proposer": ..., "k": ...}` to override the server's proposer and k for one request.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, WithJsonSchema, field_validator

from ..engine.request import MAX_TREE
from ..sampling.constraints import GrammarSpec
from ..sampling.params import InvalidParameter, SamplingParams
from ..verification.logprobs import MAX_TOP

# The bounds below are the ones the engine enforces, written into the schema so that /openapi.json
# is the contract clients read: a body the schema allows is one the server runs (token ids beyond
# the model's vocabulary and prompts beyond its context are the exceptions a schema cannot know).
MAX_N = 16  # choices per request (each is a row of the batch)
MAX_K = 64  # tokens drafted per pass a request may ask for
MAX_SEED = 2**53 - 1  # the largest integer every JSON parser holds exactly (choice i uses seed + i)


def _json_integer(value):
    # JSON Schema's integer is a value, not a spelling: 14.0 is the integer 14 (a string never is).
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(**bounds):
    """An integer field type with its bounds in the schema (in strict models: no strings, no booleans)."""
    return Annotated[int, Field(**bounds), BeforeValidator(_json_integer)]


TokenId = integer(ge=0)
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Penalty = Annotated[float, Field(ge=-2, le=2)]
TOKEN_KEY = r"^[0-9]{1,10}$"
# Token id (as a string of digits) -> bias; keys of any other shape are not allowed.
LogitBias = Annotated[dict[Annotated[str, StringConstraints(pattern=TOKEN_KEY)], Annotated[float, Field(ge=-100, le=100)]],
                      WithJsonSchema({"type": "object", "additionalProperties": False, "patternProperties": {
                          TOKEN_KEY: {"type": "number", "minimum": -100, "maximum": 100}}})]


# The rule a field follows, in words, for the 400 a body that breaks it gets (pydantic's own message
# is used for the rest). Keys are field paths in the body.
RULES = {
    "n": f"n must be an integer in [1, {MAX_N}] (choices per request)",
    "logprobs": f"logprobs must be true or false, or (completions) an integer in [0, {MAX_TOP}]: the "
                "alternatives per token",
    "prompt": "prompt must be a non-empty string, a non-empty list of token ids, or a list of one non-empty string",
    "speculative.k": f"speculative.k must be an integer in [0, {MAX_K}] (tokens drafted per pass) or 'auto'",
    "speculative.tree": f"speculative.tree is the node budget per pass, an integer in [0, {MAX_TREE}] (0: a chain)",
    "stop": "stop must be a non-empty string or a list of them",
    "echo": "echo is not supported: it must be false or absent",
    "response_format": "response_format.type must be text, json_object or json_schema (with json_schema.schema)",
}


def as_served(value, served: bool | float) -> bool:
    """Whether a request's value of an AS_SERVED field is what this server does: the same boolean,
    or the same number (JSON's 1 and 1.0 alike, never a boolean for a number)."""
    if isinstance(served, bool):
        return value is served
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == served


def describe(errors: list[dict], limit: int = 3) -> str:
    """One line naming each field a body breaks and what it must be (pydantic reports a union's
    every branch: they fold into one entry per field)."""
    seen: dict[str, str] = {}
    for e in errors:
        parts = [str(x) for x in e.get("loc", ()) if x != "body"]
        # Union branches appear in the path as type tags (bool, constrained-int, list[...]); a field
        # path keeps names and list indexes only.
        names = [x for x in parts if x.isidentifier() and x not in ("bool", "int", "str", "float", "dict", "list",
                                                                     "none") or x.isdigit()]
        # A discriminated union repeats its tag (response_format.json_schema.json_schema): once is enough.
        path = ".".join(x for i, x in enumerate(names) if i == 0 or x != names[i - 1])
        if path in seen:
            continue
        rule = RULES.get(path) or RULES.get(path.split(".")[0] if path.startswith(("prompt.", "stop.")) else "")
        if e.get("type") == "missing":
            seen[path] = f"{path} is required"
        elif rule:
            value = e.get("input")
            seen[path] = f"{rule}, got {value!r}" if not isinstance(value, (dict, list)) else rule
        else:
            seen[path] = f"{path}: {e.get('msg')}" if path else str(e.get("msg"))
    return "; ".join(list(seen.values())[:limit])


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    proposer: Literal["draft", "ngram", "suffix", "hybrid", "hybrid-suffix", "none"] | None = None
    k: integer(ge=0, le=MAX_K) | Literal["auto"] | None = None
    verifier: Literal["token", "block"] = "token"
    tree: integer(ge=0, le=MAX_TREE) = 0  # node budget per pass for tree drafting (0: a chain)


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)
    name: str | None = None
    description: str | None = None
    schema_: dict = Field(alias="schema")
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_object"]


class JsonSchemaResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


# OpenAI's response_format: text, json_object, or json_schema with the schema to follow.
ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaResponseFormat, Field(discriminator="type")]


# OpenAI, vLLM and SGLang request fields that change what a client gets, which this server does not
# implement: a request that sets one is refused (400 naming the field), never answered as if it had
# not (docs/serving.md lists every field and what happens to it). Fields that change nothing of the
# output (user, metadata, store, service_tier, parallel_tool_calls without tools, ...) are accepted.
REFUSED = ("tools", "tool_choice", "functions", "function_call", "prompt_logprobs", "length_penalty", "best_of",
           "use_beam_search", "suffix", "min_tokens", "bad_words", "allowed_token_ids", "prediction", "modalities",
           "audio", "logits_processors", "guided_decoding_backend", "guided_whitespace_pattern",
           # vLLM and SGLang: the prompt's rendering, other constraints and output shapes
           "truncate_prompt_tokens", "chat_template", "chat_template_kwargs", "documents", "mm_processor_kwargs",
           "prompt_embeds", "vllm_xargs", "min_new_tokens", "regex", "ebnf", "json_schema", "structural_tag",
           "custom_logit_processor",
           # llama-server's own names and samplers
           "n_predict", "n_probs", "samplers", "grammar", "t_max_predict_ms",
           # OpenAI's reasoning and search options
           "reasoning_effort", "verbosity", "web_search_options")
# Fields of vLLM, SGLang and llama-server that change the output unless they hold the value this
# server behaves as anyway: that value is accepted (a client that states the default is served),
# any other is refused like the fields above.
AS_SERVED: dict[str, bool | float] = {
    "skip_special_tokens": True, "spaces_between_special_tokens": True, "include_stop_str_in_output": False,
    "no_stop_trim": False, "add_generation_prompt": True, "continue_final_message": False,
    "return_tokens_as_token_ids": False, "typical_p": 1.0, "tfs_z": 1.0, "top_a": 0.0, "repeat_penalty": 1.0,
    "mirostat": 0, "dynatemp_range": 0.0, "xtc_probability": 0.0, "dry_multiplier": 0.0, "top_n_sigma": -1.0,
}
# vLLM's guided_* fields and structured_outputs keys, as constraints.GrammarSpec kinds.
GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


class CommonRequest(BaseModel):
    # Unknown fields are kept, so that unsupported() can see them. Strict: a body's types are JSON's
    # own (0 is not false, "1" is not 1), as the schema says.
    model_config = ConfigDict(extra="allow", strict=True)
    model: str | None = None
    max_tokens: integer(ge=1) | None = None
    temperature: float = Field(1.0, ge=0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: integer(ge=-1) | None = None  # -1 and 0: off, as in vLLM
    min_p: float = Field(0.0, ge=0, le=1)
    seed: integer(ge=0, le=MAX_SEED) | None = None
    stop: NonEmpty | list[NonEmpty] | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: integer(ge=1, le=MAX_N) = 1
    top_logprobs: integer(ge=0, le=MAX_TOP) | None = None
    logprobs_mode: Literal["raw", "processed"] | None = None  # None: the server's --logprobs-mode
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    repetition_penalty: float = Field(1.0, gt=0, allow_inf_nan=False)
    logit_bias: LogitBias | None = None
    response_format: ResponseFormat | None = None
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
        for name, served in AS_SERVED.items():
            value = (self.model_extra or {}).get(name)
            if value is not None and not as_served(value, served):
                return f"{name}={json.dumps(value)} is not supported by this server, which always behaves as " \
                       f"{name}={json.dumps(served)}; it would change the output, so the request is refused rather " \
                       f"than answered as if it were {json.dumps(served)} (leave it out or set it to that; see " \
                       f"docs/serving.md)"
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
            if rf.type == "json_object":
                found.append(("response_format", GrammarSpec("json", {"type": "object"})))
            elif rf.type == "json_schema":
                found.append(("response_format", GrammarSpec("json", rf.json_schema.schema_)))
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
    # One prompt: a string, its token ids, or a list holding one string.
    prompt: NonEmpty | Annotated[list[TokenId], Field(min_length=1)] | Annotated[list[NonEmpty], Field(min_length=1,
                                                                                                      max_length=1)]
    echo: Literal[False] = False  # echoing the prompt back is not implemented
    # The legacy API: the number of alternatives per token (0: the chosen token's only).
    logprobs: bool | integer(ge=0, le=MAX_TOP) | None = None

    @field_validator("echo", mode="before")
    @classmethod
    def _echo_is_a_boolean(cls, value):
        # A Literal compares by equality, and 0 == False: only JSON's false is the value the schema allows.
        if not isinstance(value, bool):
            raise ValueError("echo must be a boolean")
        return value

    def top(self) -> int | None:
        """The legacy API: logprobs is the number of alternatives (0: the chosen token's only)."""
        lp = self.logprobs
        if lp is None or lp is False:
            return None
        return 0 if lp is True else lp



class TextPart(BaseModel):
    """A content part; only text is implemented (an image part is refused by the schema)."""
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatRequest(CommonRequest):
    # The schema states what top() enforces: alternatives per token need logprobs: true.
    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"top_logprobs": {"type": "integer", "minimum": 1}}, "required": ["top_logprobs"]},
        "then": {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]}})

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: integer(ge=1) | None = None
    logprobs: bool | None = None  # a switch; top_logprobs is the number of alternatives

    def top(self) -> int | None:
        """The chat API: logprobs is a switch, top_logprobs the number of alternatives."""
        top = self.top_logprobs
        if not self.logprobs:
            if top:
                raise InvalidParameter("top_logprobs needs logprobs: true")
            return None
        return top or 0


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    """OpenAI's error shape, which every 4xx and 5xx of this server has."""
    error: ErrorBody


# What a generation request can answer besides 200, for the OpenAPI document.
ERRORS = {200: {"description": "the completion, or with stream: true its server-sent events",
               "content": {"text/event-stream": {"schema": {
              "type": "object", "properties": {"data": {"type": "string"}, "event": {"type": "string"}}}}}},
          400: {"model": ErrorResponse, "description": "the body breaks a rule; the message names the field"},
          404: {"model": ErrorResponse, "description": "the model named is not the one served"},
          429: {"model": ErrorResponse, "description": "the queue is full: retry later"},
          503: {"model": ErrorResponse, "description": "the server is shutting down"}}

