"""One request in the engine: what was asked, what has been emitted, and its stop rules."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..sampling.constraints import Grammar, GrammarSpec, PenaltyCounts, apply_logit_bias, apply_mask
from ..policy.costs import AcceptanceTracker
from ..verification.invariant import exponentials
from ..verification.logprobs import check_logprobs
from ..sampling.params import InvalidParameter, SamplingParams
from .stats import GenerationStats
from .textstream import OnToken, TextStream
from ..verification.tree import path_to

_ids = itertools.count(1)

# on_step(request, tokens emitted this step, text that became final with them); after the last
# step request.finish_reason is set (or request.error).
OnStep = Callable[["Request", list[int], str], None]


class RequestError(ValueError):
    """The request cannot be served as given (empty prompt, too long for the context, ...)."""


class QueueFull(RuntimeError):
    """More requests are waiting than the engine allows; the client should retry later."""


@dataclass(eq=False)
class Request:
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

    # Filled in by the engine.
    generated: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None  # stop | length | abort | error
    error: str | None = None
    exception: BaseException | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)
    submitted_at: float = field(default_factory=time.perf_counter)
    cancelled: bool = False

    # The engine's working state while the request runs.
    context: list[int] = field(default_factory=list)  # prompt + everything emitted
    generator: torch.Generator | None = None
    stop_ids: frozenset[int] = frozenset()
    stream: TextStream | None = None
    auto: object | None = None  # adaptive.SourceChoice under k="auto"
    acceptance: AcceptanceTracker | None = None  # recent acceptance, for the load policy
    pending: list[str] = field(default_factory=list)  # text deltas of this step
    # The drafter-invariant sampler (verification/invariant.py): the seed its noise is keyed by, None otherwise.
    noise_seed: int | None = None
    vocab: int = 0
    matcher: Grammar | None = None
    penalties: PenaltyCounts | None = None
    token_logprobs: list = field(default_factory=list)  # logprobs.TokenLogprob per emitted token
    _noise: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

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

    @property
    def invariant(self) -> bool:
        return self.noise_seed is not None

    def noise(self, position: int) -> torch.Tensor:
        """The race noise (verification/invariant.py) of an absolute position of this sequence (kept while it may be needed)."""
        if position not in self._noise:
            self._noise[position] = exponentials(self.noise_seed, position, self.vocab)
        return self._noise[position]

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def shaped(self) -> bool:
        """Logits are transformed by what came before (penalties, bias, a grammar)."""
        return self.penalties is not None or self.matcher is not None or bool(self.params.logit_bias)

    def shape_at(self, logits: torch.Tensor, extra: list[int]) -> torch.Tensor:
        """Logits [V'] of the position after the context plus `extra` (drafts before it), with this
        request's penalties, logit bias and grammar mask: the same for the target and the draft."""
        if self.penalties is not None:
            logits = self.penalties.apply(logits, extra)
        if self.params.logit_bias:
            logits = apply_logit_bias(logits, self.params.logit_bias)
        if self.matcher is not None:
            logits = apply_mask(logits, self.matcher.allowed(extra))
        return logits

    def shape(self, logits: torch.Tensor, drafts: list[int], parents: list[int] | None = None) -> torch.Tensor:
        """Logits [n, V]: row j is the position after the context plus drafts[:j], or for a tree
        (parents, verification/tree.py) row 0 the root's and row i + 1 the position after the path to node i."""
        if not self.shaped:
            return logits
        before = [list(drafts[:j]) for j in range(logits.shape[0])] if parents is None else \
            [[]] + [[drafts[n] for n in path_to(parents, i)] for i in range(len(drafts))]
        return torch.stack([self.shape_at(logits[j], before[j]) for j in range(logits.shape[0])])

    def start(self, tokenizer, eos_ids: frozenset[int], acceptance: AcceptanceTracker, vocab: int,
              deterministic_proposer: bool,
              grammar: Grammar | None = None) -> None:
        """Set up the working state as the request enters the batch."""
        params = self.params
        self.context = list(self.prompt_ids)
        self.matcher = grammar
        self.penalties = PenaltyCounts(params, self.prompt_ids, vocab) if params.penalised else None
        self.generator = params.make_generator()
        self.vocab = vocab
        sampler = params.sampler or ("invariant" if params.seed is not None or deterministic_proposer else "standard")
        if sampler == "invariant" and not params.greedy:
            # An unseeded request still needs one seed for all its positions: drawn from its generator.
            self.noise_seed = params.seed if params.seed is not None else \
                int(torch.randint(0, 2**62, (1,), generator=self.generator))
        self.stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else eos_ids)
        self.acceptance = acceptance
        self.stats.prompt_tokens = len(self.prompt_ids)

        def on_token(token, delta):
            self.pending.append(delta)
            if self.on_token is not None:
                self.on_token(token, delta)

        self.stream = TextStream(tokenizer, params.stop, on_token)

    def commit(self, tokens: list[int], max_context: int,
               logprobs: list | None = None) -> tuple[list[int], str | None]:
        """Emit a verified block token by token, up to the first stop: (tokens emitted, the finish
        reason when a stop rule ended the request, else None); `logprobs`: each token's entry, kept
        for the tokens emitted."""
        for position in [p for p in self._noise if p < len(self.context) + len(tokens)]:
            del self._noise[position]  # positions now emitted are never drawn again
        for n, token in enumerate(tokens, 1):
            if logprobs:
                self.token_logprobs.append(logprobs[n - 1])
            reason = self.emit(token, max_context)
            if reason is not None:
                return tokens[:n], reason
        return list(tokens), None

    def notify(self, tokens: list[int]) -> None:
        """Hand this step's tokens and the text that became final with them to on_step."""
        delta = "".join(self.pending)
        self.pending.clear()
        if self.on_step is not None:
            try:
                self.on_step(self, tokens, delta)
            except Exception:  # a broken consumer loses its own stream, not the batch
                self.cancelled = True

    def emit(self, token: int, max_context: int) -> str | None:
        """Append one token and apply the stop rules: "stop" or "length" when one ends the request."""
        self.context.append(token)
        self.generated.append(token)
        if self.penalties is not None:
            self.penalties.push(token)
        if self.matcher is not None and token not in self.stop_ids:
            self.matcher.commit(token)
            if self.matcher.stopped:  # the grammar is complete: nothing more may follow
                self.stream.push(token, final=True)
                return "stop"
        if token in self.stop_ids:
            self.stream.push(token, final=True)
            return "stop"
        if self.stream.push(token):
            return "stop"
        if len(self.generated) >= self.params.max_new_tokens or len(self.context) + 1 > max_context:
            return "length"
        return None

    def room(self, max_context: int) -> int:
        """Drafts this request may still take in one pass: what max_new_tokens and the context allow."""
        return max(0, min(self.params.max_new_tokens - len(self.generated) - 1, max_context - len(self.context) - 1))

    def finish(self, reason: str) -> None:
        """Close the request: by its own stop rule ("stop", "length": the held-back text is released)
        or by the engine ("abort", "error": the text stays what was already final)."""
        natural = reason in ("stop", "length")
        self.text = "" if self.stream is None else self.stream.finish() if natural else self.stream.text
        self.stats.total_s = time.perf_counter() - self.submitted_at
        self.stats.new_tokens = len(self.generated)
        self.finish_reason = reason


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
