"""The one engine: every request, proposer and backend goes through one batched `step()`.

    step():
        schedule   cancelled requests leave; waiting ones join (prefill, rows sharing a prompt once)
        plan       k per row (fixed, or k="auto"'s choice), then the load cap over the batch
        propose    each proposer drafts for all of its rows at once
        score      one target pass over every row's last token + its drafts (ragged widths)
        verify     each row's own rejection step with its own generator (exact, batch-independent)
        commit     caches keep each row's accepted prefix (bookkeeping, nothing copied)
        learn      pass costs and acceptance, for k="auto" and the load cap (policy/costs.py)
        emit       stop checks inside the emitted block, streaming callbacks, finished rows leave

`generate()` is submit + step until done; the server's worker thread calls `step()`; `verify`
samples many requests through the same step. A batch of one is just a batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..policy.auto_k import AdaptiveK, SourceChoice
from ..models.backends.base import Runner
from ..verification.block import block_rejection_sample
from ..policy.calibration import calibrate
from ..policy.costs import AcceptanceTracker, PassCosts
from ..sampling.constraints import GrammarCompiler
from ..policy.load_cap import LoadPolicy
from .step_plan import Plan, plan_rows
from .prompts import Prompt, chat_ids, encode
from ..proposers import Proposal, Proposer
from ..verification.rejection import rejection_sample
from .request import QueueFull, Request, RequestError
from ..sampling.params import InvalidParameter, SamplingParams
from .stats import GenerationOutput, StepRecord
from .textstream import OnToken
from ..verification.tree import Residual, exact_residual, subtree, trim
from ..verification.verifier import InvariantVerifier, RejectFn, TokenVerifier, TreeVerifier, Verdict, verify_row

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineConfig", "GenerationOutput", "QueueFull", "Request", "RequestError", "chat_ids"]


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 8  # rows decoded together; more requests wait
    max_waiting: int = 64  # queued requests beyond which submit() refuses (QueueFull)
    k_max: int = 8  # the largest k that k="auto" may reach
    # k="auto" drafts no further after a position where the draft's top probability is below this
    # (see proposers.draft.next_draft).
    min_confidence: float = 0.4
    cost_rule: bool = True  # k="auto" keeps k where it pays at the measured costs; off: the controller alone
    load_policy: bool = True  # over several rows, cap k where speculation would slow the batch
    reject: RejectFn = rejection_sample  # the verification rule (a wrong one only for negative controls)
    tree_residual: Residual = exact_residual  # a tree walk's residual after a rejected candidate (ditto)

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {self.k_max}")


class Engine:
    """Exact speculative decoding over a target Runner and Proposers, for any number of requests.

    `specdecode.SpeculativeGenerator` is this engine with constructors that load models (models/generator.py).
    """

    def __init__(self, target: Runner, tokenizer, proposers: dict[str, Proposer], default_proposer: str = "draft",
                 eos_token_ids: Sequence[int] = (), config: EngineConfig | None = None):
        if default_proposer not in proposers:
            raise ValueError(f"default proposer '{default_proposer}' is not among {sorted(proposers)}")
        self.target = target
        self.tokenizer = tokenizer
        self.proposers = dict(proposers)
        self.default_proposer = default_proposer
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.config = config or EngineConfig()
        self.info: dict = {}  # where the models came from and their dtypes, for reports
        # Learnt from every pass of every request, so a new request starts from what this machine
        # and these models really cost, and from how well each source has been doing lately.
        self.pass_costs = PassCosts()
        self.pooled_acceptance: dict[str, AcceptanceTracker] = {}
        self.policy = LoadPolicy(self.pass_costs, enabled=self.config.load_policy)
        self.verifiers = {"token": TokenVerifier(self.config.reject), "block": TokenVerifier(block_rejection_sample)}
        self.invariant = InvariantVerifier()
        self.tree_verifier = TreeVerifier(self.config.tree_residual)
        self.rows: list[Request] = []  # in the target runner's row order
        self.waiting: deque[Request] = deque()
        self._lock = threading.Lock()
        self._grammars: GrammarCompiler | None = None
        self.counters = {"steps": 0, "speculation_off_steps": 0, "admitted": 0, "finished": 0, "aborted": 0}

    @property
    def proposer(self) -> Proposer:
        return self.proposers[self.default_proposer]

    def get_proposer(self, name: str | None) -> Proposer:
        name = name or self.default_proposer
        if name not in self.proposers:
            raise RequestError(f"proposer '{name}' is not available here; loaded: {', '.join(sorted(self.proposers))}")
        return self.proposers[name]

    def encode(self, prompt: Prompt, chat: bool = True) -> list[int]:
        return encode(self.tokenizer, prompt, self.target.vocab_size, chat)

    @contextlib.contextmanager
    def configured(self, **changes):
        """Run with some EngineConfig fields changed, e.g. configured(cost_rule=False)."""
        saved = self.config
        self._set_config(dataclasses.replace(saved, **changes))
        try:
            yield self
        finally:
            self._set_config(saved)

    def _set_config(self, config: EngineConfig) -> None:
        self.config = config
        self.policy.enabled = config.load_policy
        self.verifiers["token"] = TokenVerifier(config.reject)
        self.tree_verifier = TreeVerifier(config.tree_residual)

    # -- one request, start to end ---------------------------------------------------------------

    def generate(self, prompt: Prompt, params: SamplingParams | None = None, k: int | str = 4, chat: bool = True,
                 on_token: OnToken | None = None, proposer: str | None = None, verifier: str = "token",
                 tree: int = 0, grammar=None, logprobs: int | None = None,
                 logprobs_mode: str = "raw") -> GenerationOutput:
        """Generate a continuation of `prompt` (text, token ids, or chat messages).

        k is the number of tokens drafted per target pass, or "auto" to adapt it per request (see
        policy/auto_k.py); `proposer` overrides the default one for this request; on_token(token_id,
        text_delta) is called for every emitted token; `verifier`: "token" (token by token) or
        "block" (the drafted block judged jointly, verification/block.py); `tree`: a node budget per pass for tree
        drafting (verification/tree.py; 0: a chain; k bounds the depth); `grammar`: a
        constraints.GrammarSpec the output must match; `logprobs`: report each token's
        log-probability and that many alternatives (verification/logprobs.py).
        """
        req = Request(self.encode(prompt, chat), params or SamplingParams(), k=k, proposer=proposer,
                      on_token=on_token, verifier=verifier, tree=tree, grammar=grammar, logprobs=logprobs,
                      logprobs_mode=logprobs_mode)
        self.submit(req)
        while not req.done:
            self.step()
        if req.exception is not None:
            raise req.exception
        return GenerationOutput(text=req.text, token_ids=req.generated, stats=req.stats.as_dict(),
                                prompt_token_ids=req.prompt_ids, finish_reason=req.finish_reason,
                                logprobs=req.token_logprobs if req.logprobs is not None else None)

    # -- requests in and out (any thread) --------------------------------------------------------

    def check(self, req: Request) -> None:
        """Raise RequestError/InvalidParameter for a request that can never run."""
        self.get_proposer(req.proposer)
        if req.tree and not getattr(self.target, "trees", False):
            raise InvalidParameter(f"tree drafting needs tree attention in the target, and the "
                                   f"{self.target.backend} target scores chains only: use tree 0, or a transformers "
                                   f"target (a model directory, not a .gguf file)")
        req.check(self.target.max_context, self.grammars if req.grammar is not None else None)

    def grammars(self) -> GrammarCompiler:
        """The grammar compiler over this engine's tokenizer (built at the first constrained request)."""
        if self._grammars is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            self._grammars = GrammarCompiler(self.tokenizer, self.target.vocab_size,
                                             eos if eos is not None else min(self.eos_token_ids, default=None))
        return self._grammars

    def submit(self, req: Request) -> None:
        """Queue a request; raises QueueFull when more requests wait than max_waiting allows."""
        self.submit_all([req])

    def submit_all(self, reqs: list[Request]) -> None:
        """Queue requests together (n choices of one prompt), all or none."""
        for req in reqs:
            self.check(req)
        with self._lock:
            if len(self.waiting) + len(reqs) > max(self.config.max_waiting, len(reqs)):
                raise QueueFull(f"{len(self.waiting)} requests are already waiting (limit "
                                f"{self.config.max_waiting}); retry later")
            now = time.perf_counter()
            for req in reqs:
                req.submitted_at = now
                self.waiting.append(req)

    def cancel(self, req: Request) -> None:
        """Stop a request (e.g. its client went away); its slot is freed before the next step."""
        req.cancelled = True

    @property
    def running(self) -> int:
        return len(self.rows)

    @property
    def queued(self) -> int:
        return len(self.waiting)

    def idle(self) -> bool:
        return not self.rows and not self.waiting

    def run_until_idle(self) -> None:
        while not self.idle():
            self.step()

    # -- the step (one thread) -------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        self._leave([r for r in self.rows if r.cancelled], "abort")
        self._admit()
        if not self.rows:
            return
        try:
            self._decode()
        except Exception as exc:
            # The requests in the batch get the message; the operator gets the traceback.
            log.exception("step failed; ending the %d running requests", len(self.rows))
            self.fail_running(exc)

    def _decode(self) -> None:
        rows = self.rows
        t0 = time.perf_counter()
        plans = self._plan(rows)
        proposals = self._propose(rows, plans)
        t1 = time.perf_counter()
        logits = self._score(rows, proposals)
        verdicts = [self._verify(r, logits[b], proposals[b]) for b, r in enumerate(rows)]
        self._drop_rejected(proposals, verdicts)
        t2 = time.perf_counter()
        self._learn(rows, plans, proposals, verdicts, t1 - t0, t2 - t1)
        finished = [r for r, p, v in zip(rows, proposals, verdicts) if self._commit(r, p, v, t1 - t0, t2 - t1)]
        self._leave(finished, None)

    # -- pieces of the step ----------------------------------------------------------------------

    def _score(self, rows: list[Request], proposals: list[Proposal]) -> list[torch.Tensor]:
        """One target pass over every row's last token and its drafts; with any tree in the batch,
        every row goes as a tree (a chain is a tree with one child per node)."""
        feeds = [[r.context[-1]] + p.tokens for r, p in zip(rows, proposals)]
        if all(p.parents is None for p in proposals):
            return self.target.forward(feeds)
        parents = [[-1] + ([p + 1 for p in proposal.parents] if proposal.parents is not None
                           else list(range(len(proposal.tokens)))) for proposal in proposals]
        return self.target.forward(feeds, parents=parents)

    def _drop_rejected(self, proposals: list[Proposal], verdicts: list[Verdict]) -> None:
        """The target's cache keeps each row's accepted drafts: a chain's prefix, a tree's path."""
        if all(p.parents is None for p in proposals):
            self.target.rollback([len(p.tokens) - v.accepted for p, v in zip(proposals, verdicts)])
            return
        self.target.prune([[0] + ([i + 1 for i in v.path] if v.path is not None else list(range(1, v.accepted + 1)))
                           for v in verdicts])

    def _verify(self, r: Request, logits: torch.Tensor, proposal: Proposal) -> Verdict:
        """The row's rule on the row's shaped logits (verifier.verify_row)."""
        return verify_row(r, logits, proposal, self.verifiers[r.verifier], self.invariant, self.tree_verifier)

    def _admit(self) -> None:
        """Waiting requests join while there is room; requests with the same prompt are prefilled
        once (n samples of one prompt, `verify`)."""
        joining: list[Request] = []
        while len(self.rows) + len(joining) < self.config.max_batch:
            with self._lock:
                if not self.waiting:
                    break
                req = self.waiting.popleft()
            if req.cancelled:
                self._finish_unstarted(req, "abort")
            else:
                joining.append(req)
        groups: dict[tuple[int, ...], list[Request]] = {}
        for req in joining:
            groups.setdefault(tuple(req.prompt_ids), []).append(req)
        for group in groups.values():
            try:
                self._join(group)
            except Exception as exc:  # one bad request must not take the batch down
                log.warning("request %s failed at admission: %s: %s", group[0].id, type(exc).__name__, exc)
                for req in group:
                    req.error, req.exception = f"{type(exc).__name__}: {exc}", exc
                    self._finish_unstarted(req, "error")

    def _join(self, group: list[Request]) -> None:
        start = time.perf_counter()
        prompt = group[0].prompt_ids
        for req in group:
            proposer = self.get_proposer(req.proposer)
            req.proposer = req.proposer or self.default_proposer
            req.start(self.tokenizer, self.eos_token_ids, self.pooled(proposer.sources[0]).conditional,
                      self.target.vocab_size, not proposer.uses_draft_model,
                      self.grammars().compile(req.grammar) if req.grammar is not None else None)
            if req.k == "auto":
                req.auto = SourceChoice({source: AdaptiveK(
                    k_max=self.config.k_max, min_confidence=self.config.min_confidence,
                    acceptance=AcceptanceTracker(prior=self.pooled(source).conditional)) for source in proposer.sources})
        # Everything but the last prompt token is prefilled: the first pass feeds that one with the
        # first drafts, so every emitted token, the first included, goes through the same rejection step.
        self.target.add_rows(prompt[:-1], len(group))
        by_proposer: dict[str, list[Request]] = {}
        for req in group:
            by_proposer.setdefault(req.proposer, []).append(req)
        try:
            for name, members in by_proposer.items():
                if any(r.k != 0 for r in members):
                    self.proposers[name].join(members)
        except Exception:
            self.target.remove_rows(list(range(len(self.rows), len(self.rows) + len(group))))
            for name, members in by_proposer.items():
                self.proposers[name].leave(members)
            raise
        self.rows.extend(group)
        for req in group:
            req.stats.prefill_s = time.perf_counter() - start
        self.counters["admitted"] += len(group)

    def _plan(self, rows: list[Request]) -> list[Plan]:
        """Each row's (source, k), then the load cap over the batch (engine/step_plan.py)."""
        plans, wanted = plan_rows(rows, self.proposers, self.policy,
                                  self.pass_costs if self.config.cost_rule else None, self.config.k_max,
                                  self.target.max_context)
        self.counters["steps"] += 1
        self.counters["speculation_off_steps"] += int(self.policy.last_cap == 0 and wanted)
        return plans

    def _propose(self, rows: list[Request], plans: list[Plan]) -> list[Proposal]:
        out: list[Proposal | None] = [None] * len(rows)
        groups: dict[str, list[int]] = {}
        for b, r in enumerate(rows):
            groups.setdefault(r.proposer, []).append(b)
        for name, idx in groups.items():
            args = ([rows[b] for b in idx], [plans[b].k for b in idx], [plans[b].source for b in idx],
                    [rows[b].auto.min_confidence if rows[b].auto is not None else 0.0 for b in idx])
            nodes = [plans[b].nodes for b in idx]
            proposals = self.proposers[name].propose(*args, nodes) if any(nodes) else self.proposers[name].propose(*args)
            for b, proposal in zip(idx, proposals):
                if proposal.parents is not None:
                    out[b] = self._trim(rows[b], proposal, len(rows))
                    continue
                k = plans[b].k
                tokens = proposal.tokens[:k]
                if rows[b].matcher is not None and proposal.probs is None:
                    # A lookup's draft the grammar forbids would be rejected for sure (p = 0 there):
                    # cut it and what follows before the target scores them.
                    tokens = tokens[: rows[b].matcher.valid_prefix(tokens)]
                probs = None if proposal.probs is None else proposal.probs[: len(tokens)]
                source = (proposal.source or plans[b].source or rows[b].proposer) if tokens else "none"
                out[b] = Proposal(tokens, probs, source, proposal.fed)
        return out

    def _trim(self, r: Request, proposal: Proposal, batch: int) -> Proposal:
        """A tree keeps its chain and the branches that pay for the wider pass at the measured
        verify cost over this many rows (tree.trim; all of them until costs are measured)."""
        known = self.config.cost_rule and bool(self.pass_costs.verify.points)
        keep = trim(proposal.parents, proposal.shares or [1.0] * len(proposal.tokens), r.acceptance.conditional,
                    (lambda w: self.pass_costs.verify_seconds(batch, w)) if known else None)
        if len(keep) == len(proposal.tokens):
            return proposal
        tokens, parents = subtree(proposal.tokens, proposal.parents, keep)
        probs = None if proposal.probs is None else proposal.probs[keep]
        return Proposal(tokens, probs, proposal.source, proposal.fed, parents,
                        [proposal.shares[i] for i in keep] if proposal.shares else None)

    def _learn(self, rows, plans, proposals, verdicts, draft_s: float, verify_s: float) -> None:
        """Book what this pass cost and what each row's drafts were worth (policy/costs.py)."""
        costs = self.pass_costs
        # A tree's branches cost no drafting steps (the draft's second choices come with its chain,
        # a lookup's with its match): drafting is booked per chain token, the pass by its width.
        if len(rows) == 1:
            p = proposals[0]
            # A pass that first caught the draft model up on many tokens says little of what a
            # drafted token costs: only its verify time is kept.
            costs.observe(p.source, 0 if p.caught_up else p.chain, draft_s, 1 + len(p.tokens), verify_s)
        else:
            costs.observe_batch(len(rows), 1 + max(len(p.tokens) for p in proposals), verify_s)
        model_rows = [p for p in proposals if p.source == "draft"]
        if model_rows and not any(p.caught_up for p in model_rows):
            costs.draft.observe(len(model_rows), draft_s / max(p.chain for p in model_rows))
        elif len(model_rows) == 1 and len(rows) == 1:
            # One row caught up: what is left of the pass beyond its drafting steps is the catch-up.
            p = model_rows[0]
            costs.observe_catch_up(p.fed, draft_s - (p.chain - 1) * costs.draft_step(1))
        for r, plan, p, v in zip(rows, plans, proposals, verdicts):
            # A tree counts by depth: position j is reached when its path got to depth j.
            drafted = p.levels
            self.pooled(p.source).update(drafted, v.accepted, v.chances)
            r.acceptance.update(drafted, v.accepted, v.chances)
            if r.auto is not None and drafted:
                r.auto.update(p.source if p.source in r.auto.rules else plan.source, drafted, v.accepted, v.chances)

    def _commit(self, r: Request, proposal: Proposal, verdict: Verdict, draft_s: float, verify_s: float) -> bool:
        """Book one verified pass for a row and emit its tokens; True when the request is finished."""
        r.stats.record_pass(len(proposal.tokens), verdict.accepted, draft_s, verify_s, verdict.chances,
                            proposal.source, proposal.levels)
        if proposal.parents is not None:
            r.stats.record_tree(proposal.parents, verdict.path)
        elif r.tree and proposal.tokens:
            r.stats.tree["chain_passes"] += 1
        emitted, done = r.commit(verdict.tokens, self.target.max_context)
        r.stats.steps.append(StepRecord(time.perf_counter() - r.submitted_at, len(proposal.tokens), verdict.accepted,
                                        len(emitted)))
        if r.stats.target_passes == 1:
            r.stats.ttft_s = r.stats.steps[-1].end_s
        if done:
            r.finish()
        r.notify(emitted)
        return done

    def _leave(self, rows: list[Request], reason: str | None) -> None:
        """Rows leave the batch: finished by their own stop rule (reason None) or aborted."""
        if not rows:
            return
        gone = {id(r) for r in rows}
        self.target.remove_rows([b for b, r in enumerate(self.rows) if id(r) in gone])
        self.rows = [r for r in self.rows if id(r) not in gone]
        for r in rows:
            self.proposers[r.proposer].leave([r])
            if reason is not None:
                r.finish(reason)
                self.counters["aborted"] += 1
                r.notify([])
            else:
                self.counters["finished"] += 1

    def _finish_unstarted(self, req: Request, reason: str) -> None:
        req.finish(reason)
        self.counters["aborted" if reason == "abort" else "finished"] += 1
        req.notify([])

    def fail_running(self, exc: BaseException) -> None:
        """A batched pass failed (a bug or out of memory): end the requests in it with an error and
        start from empty caches, so that the server and the queued requests carry on."""
        rows, self.rows = self.rows, []
        error = f"{type(exc).__name__}: {exc}"
        try:
            self.target.remove_rows(list(range(self.target.rows)))
        except Exception:
            log.exception("could not empty the target's cache after a failed step")
        for proposer in self.proposers.values():
            proposer.clear()
        for r in rows:
            r.error, r.exception = error, exc
            r.finish("error")
            self.counters["finished"] += 1
            r.notify([])

    # -- learnt state ----------------------------------------------------------------------------

    def pooled(self, source: str) -> AcceptanceTracker:
        """A source's acceptance over all recent requests (the prior of a new request's own)."""
        tracker = self.pooled_acceptance.get(source)
        if tracker is None:  # built only when missing: this runs every step
            tracker = self.pooled_acceptance[source] = AcceptanceTracker(decay=0.98)
        return tracker

    def calibrate(self) -> None:
        """Start the cost curves from a few timed passes (policy/calibration.py); call it while idle."""
        if not self.idle():
            raise RuntimeError("calibrate() needs an idle engine")
        draft = self.proposers.get("draft")
        calibrate(self.pass_costs, self.target, draft.runner if draft is not None else None)

