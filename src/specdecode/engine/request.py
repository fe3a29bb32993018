"""One request to the engine: what was asked (checked before it queues) and, apart, what came out."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..sampling.constraints import GrammarSpec
from ..verification.logprobs import check_logprobs
from ..sampling.params import InvalidParameter, SamplingParams
from .stats import GenerationStats
from .textstream import OnToken

_ids = itertools.count(1)

# on_step(request, tokens emitted this step, text that became final with them); after the last
# step request.finish_reason is set (or request.error).
OnStep = Callable[["Request", list[int], str], None]


class RequestError(ValueError):
    """The request cannot be served as given (empty prompt, too long for the context, ...)."""


class QueueFull(RuntimeError):
    """More requests are waiting than the engine allows; the client should retry later."""


@dataclass(eq=False)
class RequestOutput:
    """What a request produced, filled in by the engine as it runs; final once finish_reason is set.
    (The request's working state while it runs is its Row, engine/row.py.)"""

    generated: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None  # stop | length | abort | error
    error: str | None = None
    exception: BaseException | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)
    token_logprobs: list = field(default_factory=list)  # logprobs.TokenLogprob per emitted token

    def fail(self, exc: BaseException) -> None:
        self.error, self.exception = f"{type(exc).__name__}: {exc}", exc

    def close(self, reason: str, text: str, submitted_at: float) -> None:
        """The outcome: the final text and why it ended."""
        self.text = text
        self.stats.total_s = time.perf_counter() - submitted_at
        self.stats.new_tokens = len(self.generated)
        self.finish_reason = reason


@dataclass(eq=False)
class Request:
    """What was asked (immutable once submitted), the two signals the engine and a client share
    (submitted_at, cancelled), and the output the engine fills in."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    k: int | str = "auto"  # tokens drafted per pass, or "auto" (chosen per pass: policy/auto_k.py)
    proposer: str | None = None  # None: the engine's default
    on_step: OnStep | None = None
    on_token: OnToken | None = None  # per emitted token (token id, text that became final)
    verifier: str = "token"  # token | block (verification/block.py)
    tree: int = 0  # node budget per pass for tree drafting (verification/tree.py); 0: a chain of k drafts
    tenant: str | None = None  # the suffix proposer's memory this request reads and feeds (None: shared)
    remember: bool = True  # False: this request neither reads nor feeds any suffix memory
    grammar: GrammarSpec | None = None  # what the output must match (sampling/constraints.py)
    # Log-probabilities of every emitted token and its `logprobs` most likely alternatives (None:
    # none), under the target's raw distribution or the processed one (verification/logprobs.py).
    logprobs: int | None = None
    logprobs_mode: str = "raw"
    id: int = field(default_factory=lambda: next(_ids))
    submitted_at: float = field(default_factory=time.perf_counter)
    cancelled: bool = False
    output: RequestOutput = field(default_factory=RequestOutput)

    def check(self, max_context: int, grammars: Callable | None = None) -> None:
        """Raise RequestError/InvalidParameter if this request can never run (grammars(): the
        engine's grammar compiler, for a request with a grammar)."""
        check_k(self.k)
        check_tree(self.tree, self.verifier)
        check_logprobs(self.logprobs, self.logprobs_mode)
        if self.grammar is not None:
            grammars().check(self.grammar)
        if not self.prompt_ids:
            raise RequestError("the prompt is empty")
        if len(self.prompt_ids) + 1 > max_context:
            raise RequestError(f"the prompt has {len(self.prompt_ids)} tokens but the target's context is "
                               f"{max_context}: shorten the prompt")

    # The output's fields, read through the request (what on_step consumers and callers of submit()
    # hold); only the engine writes them, through `output`.
    generated = property(lambda self: self.output.generated)
    text = property(lambda self: self.output.text)
    finish_reason = property(lambda self: self.output.finish_reason)
    error = property(lambda self: self.output.error)
    exception = property(lambda self: self.output.exception)
    stats = property(lambda self: self.output.stats)
    token_logprobs = property(lambda self: self.output.token_logprobs)

    @property
    def done(self) -> bool:
        return self.output.finish_reason is not None

    def close(self, reason: str, text: str) -> None:
        """The request's outcome: its final text and why it ended (stop | length | abort | error)."""
        self.output.close(reason, text, self.submitted_at)

    def notify(self, tokens: list[int], delta: str) -> None:
        """Hand a step's tokens and the text that became final with them to on_step."""
        if self.on_step is not None:
            try:
                self.on_step(self, tokens, delta)
            except Exception:  # a broken consumer loses its own stream, not the batch
                self.cancelled = True


def check_k(k) -> None:
    if k != "auto" and (not isinstance(k, int) or isinstance(k, bool) or k < 0):
        raise InvalidParameter(f"k must be an integer >= 0 (tokens drafted per step) or 'auto', got {k!r}")


MAX_TREE = 64  # nodes per pass a request may ask for: wider passes stop being nearly free anywhere


def check_tree(tree, verifier: str = "token") -> None:
    """A node budget in [0, MAX_TREE], and a verifier that can judge what it drafts."""
    if not isinstance(tree, int) or isinstance(tree, bool) or not 0 <= tree <= MAX_TREE:
        raise InvalidParameter(f"tree is the node budget per pass, an integer in [0, {MAX_TREE}] (0: a chain), "
                               f"got {tree!r}")
    if verifier not in ("token", "block"):
        raise InvalidParameter(f"verifier must be token or block, got {verifier!r}")
    if tree and verifier != "token":
        raise InvalidParameter(f"a tree is walked with the multi-candidate token rule: verifier {verifier!r} judges "
                               f"one chain; use tree=0 with it, or verifier 'token'")
