"""OpenAI response bodies and stream chunks from finished (or running) engine Requests."""

from __future__ import annotations

import json
import time

from ..verification.logprobs import TokenLogprob
from ..engine.request import Request as EngineRequest


def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level BPE spells each byte as one printable character; the inverse map."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


BYTE_LEVEL = _byte_level_table()


class TokenText:
    """A token's text and its exact bytes (a byte-level token may hold part of a UTF-8 character,
    which its decoded text cannot show)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token: int) -> tuple[str, list[int]]:
        if token not in self._cache:
            text = self.tokenizer.decode([token])
            piece = self.tokenizer.convert_ids_to_tokens(token)
            if isinstance(piece, str) and piece and all(ch in BYTE_LEVEL for ch in piece):
                raw = [BYTE_LEVEL[ch] for ch in piece]
            else:
                raw = list(text.encode("utf-8"))
            self._cache[token] = (text, raw)
        return self._cache[token]


def chat_logprobs(entries: list[TokenLogprob], text_of: TokenText) -> dict:
    def item(token: int, logprob: float) -> dict:
        text, raw = text_of(token)
        return {"token": text, "logprob": logprob, "bytes": raw}

    return {"content": [dict(item(e.token, e.logprob), top_logprobs=[item(t, lp) for t, lp in e.top])
                        for e in entries]}


def completion_logprobs(entries: list[TokenLogprob], text_of: TokenText, offset: int = 0) -> dict:
    """The legacy completions format; text_offset counts characters from `offset`."""
    tokens, offsets = [], []
    for e in entries:
        offsets.append(offset)
        text = text_of(e.token)[0]
        tokens.append(text)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [_by_text(e.top, text_of) for e in entries], "text_offset": offsets}


def _by_text(top: list[tuple[int, float]], text_of: TokenText) -> dict[str, float]:
    """Alternatives keyed by their text, as the legacy format wants; tokens that decode alike (parts
    of one UTF-8 character) keep the most likely one's value."""
    out: dict[str, float] = {}
    for token, logprob in top:
        out.setdefault(text_of(token)[0], logprob)
    return out


def openai_reason(reason: str | None) -> str | None:
    return {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}.get(reason or "", reason)


def usage(reqs: list[EngineRequest]) -> dict:
    """The prompt once (its choices share its prefill), every choice's completion tokens."""
    prompt, completion = len(reqs[0].prompt_ids), sum(len(r.generated) for r in reqs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def speculative(reqs: list[EngineRequest]) -> dict:
    """Speculation stats summed over the choices."""
    drafted = sum(r.stats.drafted_tokens for r in reqs)
    accepted = sum(r.stats.accepted_tokens for r in reqs)
    passes = sum(r.stats.target_passes for r in reqs)
    emitted = sum(len(r.generated) for r in reqs)
    out = {"drafted_tokens": drafted, "accepted_tokens": accepted, "target_passes": passes,
           "acceptance_rate": accepted / drafted if drafted else 0.0,
           "tokens_per_pass": emitted / passes if passes else 0.0}
    if any(r.tree for r in reqs):
        # Tree passes: nodes scored, accepted path tokens, and which candidate won where one did.
        out["tree"] = {key: sum(r.stats.tree[key] for r in reqs) for key in reqs[0].stats.tree}
    return out


def full_response(reqs: list[EngineRequest], texts: list[str], rid: str, model: str, chat: bool,
                  text_of: TokenText) -> dict:
    choices = []
    for i, (req, text) in enumerate(zip(reqs, texts)):
        reason = openai_reason(req.finish_reason)
        logprobs = None
        if req.logprobs is not None:
            logprobs = chat_logprobs(req.token_logprobs, text_of) if chat else \
                completion_logprobs(req.token_logprobs, text_of)
        if chat:
            choices.append({"index": i, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                            "finish_reason": reason})
        else:
            choices.append({"index": i, "text": text, "logprobs": logprobs, "finish_reason": reason})
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(reqs), "speculative": speculative(reqs)}


class Chunks:
    """Server-sent events of one streamed response (any number of choices)."""

    def __init__(self, reqs: list[EngineRequest], rid: str, model: str, chat: bool, text_of: TokenText,
                 continuous_usage: bool):
        self.reqs, self.rid, self.model, self.chat, self.text_of = reqs, rid, model, chat, text_of
        self.continuous = continuous_usage
        self.created = int(time.time())
        self.offsets = [0] * len(reqs)  # per choice, the text_offset of its next token (completions)

    def event(self, choices: list[dict], **fields) -> str:
        body = {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": choices, **fields}
        return f"data: {json.dumps(body)}\n\n"

    def roles(self) -> str:
        return self.event([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None} for i in range(len(self.reqs))])

    def step(self, i: int, delta: str, entries: list[TokenLogprob]) -> str:
        req = self.reqs[i]
        logprobs = None
        if req.logprobs is not None:
            logprobs = chat_logprobs(entries, self.text_of) if self.chat else \
                completion_logprobs(entries, self.text_of, self.offsets[i])
        self.offsets[i] += sum(len(self.text_of(e.token)[0]) for e in entries)
        if self.chat:
            choice = {"index": i, "delta": {"content": delta} if delta else {}, "logprobs": logprobs,
                      "finish_reason": None}
        else:
            choice = {"index": i, "text": delta, "logprobs": logprobs, "finish_reason": None}
        return self.event([choice], **self._usage())

    def finish(self, i: int) -> str:
        """The choice's last chunk: its finish reason and its speculation stats (as vLLM sends them)."""
        req = self.reqs[i]
        choice = {"index": i, "delta": {}, "logprobs": None} if self.chat else {"index": i, "text": "", "logprobs": None}
        choice["finish_reason"] = openai_reason(req.finish_reason)
        return self.event([choice], speculative=speculative([req]), **self._usage())

    def usage(self) -> str:
        return self.event([], usage=usage(self.reqs), speculative=speculative(self.reqs))

    def _usage(self) -> dict:
        return {"usage": usage(self.reqs)} if self.continuous else {}
