"""The OpenAI request bodies we accept, and how they become a Request.

Fields that would change the output and are not implemented (REFUSED, n > 1, logprobs, penalties,
echo) are refused with a 400 that names them, never silently dropped; other unknown fields, which
change nothing a client gets (user, metadata, ...), are accepted. Extensions, as in vLLM:
top_k, min_p, ignore_eos, stop_token_ids, and `speculative: {"proposer": ..., "k": ...}` to
override the server's proposer and k for one request.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..sampling import InvalidParameter, SamplingParams


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid")
    proposer: Literal["draft", "ngram", "suffix", "hybrid", "hybrid-suffix", "none"] | None = None
    k: int | Literal["auto"] | None = None
    verifier: Literal["token", "block"] = "token"
    tree: int = 0  # tree drafting is not built yet: anything but 0 is refused


# OpenAI, vLLM and SGLang request fields that change what a client gets, which this server does not
# implement: a request that sets one is refused (400 naming the field), never answered as if it had
# not (docs/serving.md lists every field and what happens to it). Fields that change nothing of the
# output (user, metadata, store, service_tier, parallel_tool_calls without tools, ...) are accepted.
REFUSED = ("response_format", "tools", "tool_choice", "functions", "function_call", "logit_bias", "top_logprobs",
           "prompt_logprobs", "repetition_penalty", "length_penalty", "best_of", "use_beam_search", "suffix",
           "min_tokens", "bad_words", "allowed_token_ids", "guided_json", "guided_regex", "guided_choice",
           "guided_grammar", "structured_outputs", "prediction", "modalities", "audio", "logits_processors")


def _is_text(response_format) -> bool:
    """response_format {"type": "text"} is the default: plain text, honoured as it is."""
    return isinstance(response_format, dict) and response_format.get("type") == "text"


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
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    speculative: Speculative | None = None
    # "standard" | "invariant" (drafter-invariant sampling); default: invariant when seeded.
    sampler: Literal["standard", "invariant"] | None = None
    user: str | None = None  # OpenAI's end-user id: the suffix memory's tenant under --suffix-scope client

    def unsupported(self) -> str | None:
        for name in REFUSED:
            value = (self.model_extra or {}).get(name)
            if value not in (None, False, 0, "", [], {}) and not (name == "response_format" and _is_text(value)):
                return f"{name} is not supported by this server; it would change the output, so the request is " \
                       "refused rather than answered without it (see docs/serving.md)"
        if self.n != 1:
            return "n must be 1: one completion per request is supported"
        if self.logprobs not in (None, False, 0):
            return "logprobs are not supported by this server"
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty and frequency_penalty are not supported (they would change the target's " \
                   "distribution that speculation reproduces)"
        return None

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        top_k = self.top_k if self.top_k is not None and self.top_k > 0 else 0  # -1 / 0 = off, as in vLLM
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(max_new_tokens=max_new_tokens, temperature=self.temperature, top_k=top_k,
                              top_p=self.top_p, min_p=self.min_p, seed=self.seed, stop=stop,
                              stop_token_ids=list(self.stop_token_ids or []), ignore_eos=self.ignore_eos,
                              sampler=self.sampler)


class CompletionRequest(CommonRequest):
    prompt: str | list[int] | list[str]
    echo: bool = False

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
