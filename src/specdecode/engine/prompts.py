"""Prompts in, token ids out: text, token ids, or chat messages under the model's template."""

from __future__ import annotations

from collections.abc import Sequence

from .request import RequestError

Prompt = str | Sequence[int] | Sequence[dict]


def encode(tokenizer, prompt: Prompt, vocab_size: int, chat: bool = True) -> list[int]:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise RequestError("the prompt is empty: give some text or a list of token ids")
        if chat:
            return chat_ids(tokenizer, [{"role": "user", "content": prompt}])
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    items = list(prompt)
    if not items:
        raise RequestError("the prompt is empty: give some text or a list of token ids")
    if all(isinstance(m, dict) for m in items):
        return chat_ids(tokenizer, items)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        raise RequestError("a prompt must be a string, a list of token ids, or a list of chat messages")
    bad = [t for t in items if not 0 <= t < vocab_size]
    if bad:
        raise RequestError(f"prompt token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return list(items)


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation under the model's chat template, ready for the assistant's turn."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise RequestError("this target model has no chat template: pass chat=False (CLI: --no-chat)")
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
