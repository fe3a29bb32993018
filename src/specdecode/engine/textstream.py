"""Incremental detokenisation with stop strings, for streaming text as tokens are emitted."""

from __future__ import annotations

from collections.abc import Callable

# Called once per emitted token with the text that became final with it (possibly ""), and once
# more with token None for whatever was held back until the end.
OnToken = Callable[[int | None, str], None]


class TextStream:
    """Decodes the generated ids after each token and reports the text that can no longer change.

    Text is held back while it ends in an incomplete UTF-8 sequence, and by len(longest stop) - 1
    characters so that a stop string split across tokens is never streamed before it is cut.
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = (), on_token: OnToken | None = None):
        self.tokenizer = tokenizer
        self.stop = stop
        self.on_token = on_token
        self.holdback = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0

    def push(self, token: int, final: bool = False) -> bool:
        """Add a token; True if a stop string now appears (the text is cut before it)."""
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True) if self.tokenizer is not None else ""
        hits = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.text = text[: min(hits)]
            self._report(token, len(self.text))
            return True
        self.text = text
        safe = len(text) - self.holdback
        while safe > 0 and text[safe - 1] == "\ufffd":  # an incomplete multi-byte character
            safe -= 1
        self._report(token, len(text) if final else safe)
        return False

    def _report(self, token: int | None, upto: int) -> None:
        delta = self.text[self.sent : upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        if self.on_token is not None:
            self.on_token(token, delta)

    def finish(self) -> str:
        if self.sent < len(self.text) and self.on_token is not None:
            self.on_token(None, self.text[self.sent :])
        self.sent = len(self.text)
        return self.text
