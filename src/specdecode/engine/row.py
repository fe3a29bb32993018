"""A request's working state while it is in the batch: its context, random draws, stop rules, text
stream, logit shaping and what it has learnt of acceptance. A Row is what proposers, the plan stage
and the verifier read (the Row protocol in proposers/base.py); it writes the output into its Request.
"""

from __future__ import annotations

import torch

from ..policy.costs import AcceptanceTracker
from ..sampling.constraints import Grammar, PenaltyCounts, apply_logit_bias, apply_mask
from ..verification.invariant import RaceNoise, exponentials
from ..verification.tree import path_to
from .request import Request
from .textstream import TextStream


class Row:
    def __init__(self, request: Request, tokenizer, eos_ids: frozenset[int], acceptance: AcceptanceTracker,
                 vocab: int, deterministic_proposer: bool, grammar: Grammar | None = None, proposer: str = ""):
        self.request = request
        self.proposer = proposer or request.proposer  # the proposer's name (the engine's default filled in)
        params = self.params = request.params
        # The ask as the step reads it (fixed for the request's life).
        self.id, self.prompt_ids, self.tree = request.id, request.prompt_ids, request.tree
        self.tenant, self.remember = request.tenant, request.remember
        self.context = list(request.prompt_ids)  # prompt + everything emitted
        self.unfed: list[int] = []  # prompt tokens the target's cache has yet to take (engine._score)
        self.matcher = grammar
        self.penalties = PenaltyCounts(params, request.prompt_ids, vocab) if params.penalised else None
        self.generator = params.make_generator()
        self.vocab = vocab
        # The drafter-invariant sampler (verification/invariant.py): the seed its noise is keyed by,
        # None otherwise; an unseeded request still needs one seed for all its positions, drawn from
        # its generator.
        self.noise_seed = None
        sampler = params.sampler or ("invariant" if params.seed is not None or deterministic_proposer else "standard")
        if sampler == "invariant" and not params.greedy:
            self.noise_seed = params.seed if params.seed is not None else \
                int(torch.randint(0, 2**62, (1,), generator=self.generator))
        self._noise: dict[int, RaceNoise] = {}
        self.stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else eos_ids)
        self.acceptance = acceptance  # recent acceptance, for the load policy
        self.auto = None  # policy/auto_k.SourceChoice under k="auto"
        self.pending: list[str] = []  # text deltas of this step
        request.output.stats.prompt_tokens = len(request.prompt_ids)

        def on_token(token, delta):
            self.pending.append(delta)
            if request.on_token is not None:
                request.on_token(token, delta)

        self.stream = TextStream(tokenizer, params.stop, on_token)

    @property
    def sampled(self) -> bool:
        """Sampled, not greedy: which of its proposers' pooled acceptances it learns from."""
        return not self.params.greedy

    @property
    def invariant(self) -> bool:
        return self.noise_seed is not None

    def noise(self, position: int) -> RaceNoise:
        """The race noise (verification/invariant.py) of an absolute position of this sequence (kept
        while it may be needed)."""
        if position not in self._noise:
            self._noise[position] = RaceNoise.of(exponentials(self.noise_seed, position, self.vocab))
        return self._noise[position]

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

    def commit(self, tokens: list[int], max_context: int,
               logprobs: list | None = None) -> tuple[list[int], str | None]:
        """Emit a verified block token by token, up to the first stop: (tokens emitted, the finish
        reason when a stop rule ended the request, else None); `logprobs`: each token's entry, kept
        for the tokens emitted."""
        for position in [p for p in self._noise if p < len(self.context) + len(tokens)]:
            del self._noise[position]  # positions now emitted are never drawn again
        for n, token in enumerate(tokens, 1):
            if logprobs:
                self.request.output.token_logprobs.append(logprobs[n - 1])
            reason = self.emit(token, max_context)
            if reason is not None:
                return tokens[:n], reason
        return list(tokens), None

    def emit(self, token: int, max_context: int) -> str | None:
        """Append one token and apply the stop rules: "stop" or "length" when one ends the request."""
        self.context.append(token)
        generated = self.request.output.generated
        generated.append(token)
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
        if len(generated) >= self.params.max_new_tokens or len(self.context) + 1 > max_context:
            return "length"
        return None

    def room(self, max_context: int) -> int:
        """Drafts this request may still take in one pass: what max_new_tokens and the context allow."""
        return max(0, min(self.params.max_new_tokens - len(self.request.generated) - 1,
                          max_context - len(self.context) - 1))

    def notify(self, tokens: list[int]) -> None:
        """Hand this step's tokens and the text that became final with them to the request's on_step."""
        delta = "".join(self.pending)
        self.pending.clear()
        self.request.notify(tokens, delta)

    def finish(self, reason: str) -> None:
        """Close the request: by its own stop rule ("stop", "length": the held-back text is released)
        or by the engine ("abort", "error": the text stays what was already final)."""
        natural = reason in ("stop", "length")
        self.request.close(reason, self.stream.finish() if natural else self.stream.text)
