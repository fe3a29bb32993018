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

import torch

from ..models.backends.base import Runner, sampling_threads, torch_threads
from ..policy.auto_k import AdaptiveK, SourceChoice
from ..policy.calibration import calibrate
from ..policy.costs import AcceptanceTracker, PassCosts
from ..policy.load_cap import LoadPolicy
from ..proposers import DraftModelProposer, Proposal, Proposer
from ..sampling.constraints import GrammarCompiler
from ..sampling.params import SamplingParams
from ..verification.verifier import Verdict, Verifier
from .config import EngineConfig
from .drafting import propose
from .prompts import Prompt, chat_ids, encode
from .request import QueueFull, Request, RequestError
from .row import Row
from .schedule import Scheduler
from .stats import GenerationOutput, StageClock, StepRecord
from .step_plan import Plan, plan_rows
from .textstream import OnToken

log = logging.getLogger(__name__)

__all__ = ["Engine", "EngineConfig", "GenerationOutput", "QueueFull", "Request", "RequestError", "chat_ids"]


class Engine(Scheduler):
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
        # Keyed by (source, sampled): see pooled().
        self.pooled_acceptance: dict[tuple[str, bool], AcceptanceTracker] = {}
        # A source's acceptance before any pass has judged it, where it was measured (the draft
        # model's agreement with the target when --draft auto chose it, greedy and at T = 1); the
        # knob's prior elsewhere.
        self.source_priors: dict[tuple[str, bool], float] = {}
        self.policy = LoadPolicy(self.pass_costs, enabled=self.config.load_policy, knobs=self.config.load_cap)
        self.verifier = Verifier(self.config.reject, self.config.tree_residual)
        self._branch_like(self.config)
        self.rows: list[Row] = []  # the running requests' working state, in the target runner's row order
        self.waiting: deque[Request] = deque()
        self._lock = threading.Lock()
        # One step at a time: a caller's generate() beside a server's loop on the same engine would
        # otherwise run two passes over the same rows at once. Each step advances every running
        # request, so threads that take turns each see their own request finish.
        self._stepping = threading.Lock()
        self._grammars: GrammarCompiler | None = None
        self.counters = {"steps": 0, "speculation_off_steps": 0, "admitted": 0, "finished": 0, "aborted": 0}
        # With no torch model here a step runs torch on one thread (backends.base.sampling_threads).
        runners = [target] + [p.runner for p in self.proposers.values() if isinstance(p, DraftModelProposer)]
        self.step_threads = sampling_threads(runners)

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
        """Run with some EngineConfig fields changed, e.g. configured(cost_rule=False).

        Everything the engine runs inside the block, from any thread, runs under the changes. It
        refuses an engine with requests running or waiting, which were admitted under the config in
        force, and swaps between steps, so no step sees half of one config and half of the other.
        """
        with self._stepping:
            if not self.idle():
                raise RuntimeError(f"configured() needs an idle engine, and {self.running} requests run and "
                                   f"{self.queued} wait: change the config before serving, or after the "
                                   f"requests finish")
            saved = self.config
            self._set_config(dataclasses.replace(saved, **changes))
        try:
            yield self
        finally:
            with self._stepping:
                self._set_config(saved)

    def _set_config(self, config: EngineConfig) -> None:
        old, self.config = self.config, config
        self.policy.enabled = config.load_policy
        if config.load_cap != old.load_cap:
            self.policy.configure(config.load_cap)
        self.verifier = Verifier(config.reject, config.tree_residual)
        self._branch_like(config)

    def _branch_like(self, config: EngineConfig) -> None:
        """The draft model branches by the config's tree knobs (a hybrid shares its draft proposer)."""
        for proposer in self.proposers.values():
            if isinstance(proposer, DraftModelProposer):
                proposer.tree = config.tree

    # -- one request, start to end ---------------------------------------------------------------

    def generate(self, prompt: Prompt, params: SamplingParams | None = None, k: int | str = "auto", chat: bool = True,
                 on_token: OnToken | None = None, proposer: str | None = None, verifier: str = "token",
                 tree: int = 0, grammar=None, logprobs: int | None = None,
                 logprobs_mode: str = "raw") -> GenerationOutput:
        """Generate a continuation of `prompt` (text, token ids, or chat messages).

        k is the number of tokens drafted per target pass, or "auto" (the default) to adapt it per
        request (see policy/auto_k.py); `proposer` overrides the default one for this request; on_token(token_id,
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

    # -- the step (one thread) -------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        with self._stepping:
            self._leave([r for r in self.rows if r.request.cancelled], "abort")
            self._admit()
            if not self.rows:
                return
            try:
                with torch_threads(self.step_threads):
                    self._decode()
            except Exception as exc:
                # The requests in the batch get the message; the operator gets the traceback.
                log.exception("step failed; ending the %d running requests", len(self.rows))
                self.fail_running(exc)

    def _decode(self) -> None:
        rows = self.rows
        clock = StageClock()
        plans = self._plan(rows)
        clock.lap("plan")
        proposals = self._propose(rows, plans)
        clock.lap("propose")
        prefilling = [bool(r.unfed) for r in rows]
        logits = self._score(rows, proposals)
        clock.lap("score")
        verdicts = [self.verifier.verify(r, logits[b], proposals[b]) for b, r in enumerate(rows)]
        self._drop_rejected(proposals, verdicts)
        clock.lap("verify")
        draft_s, verify_s = clock.sum("plan", "propose"), clock.sum("score", "verify")
        # A pass that also prefilled a prompt says nothing of what scoring drafts costs.
        self._learn(rows, plans, proposals, verdicts, draft_s, 0.0 if any(prefilling) else verify_s)
        clock.lap("learn")
        finished = [r for r, p, v, pre in zip(rows, proposals, verdicts, prefilling)
                    if self._commit(r, p, v, draft_s, verify_s, clock.stages, pre)]
        self._leave(finished, None)

    # -- pieces of the step ----------------------------------------------------------------------

    def _score(self, rows: list[Row], proposals: list[Proposal]) -> list[torch.Tensor]:
        """One target pass over every row's last token and its drafts; with any tree in the batch,
        every row goes as a tree (a chain is a tree with one child per node). A row whose prompt
        is still unfed (schedule._join) leads with it, without logits."""
        unscored = [len(r.unfed) for r in rows]
        feeds = [r.unfed + [r.context[-1]] + p.tokens for r, p in zip(rows, proposals)]
        for r in rows:
            r.unfed = []
        if any(unscored):
            return self.target.forward(feeds, unscored=unscored)
        if all(p.parents is None for p in proposals):
            return self.target.forward(feeds)
        return self.target.forward(feeds, parents=[p.feed_parents() for p in proposals])

    def _drop_rejected(self, proposals: list[Proposal], verdicts: list[Verdict]) -> None:
        """The target's cache keeps each row's accepted drafts: a chain's prefix, a tree's path."""
        if all(p.parents is None for p in proposals):
            self.target.rollback([len(p.tokens) - v.accepted for p, v in zip(proposals, verdicts)])
            return
        self.target.prune([v.kept_rows() for v in verdicts])

    def _plan(self, rows: list[Row]) -> list[Plan]:
        """Each row's (source, k), then the load cap over the batch (engine/step_plan.py)."""
        plans, wanted = plan_rows(rows, self.proposers, self.policy,
                                  self.pass_costs if self.config.cost_rule else None, self.config.auto_k.k_max,
                                  self.target.max_context, self.config.load_cap)
        self.counters["steps"] += 1
        self.counters["speculation_off_steps"] += int(self.policy.last_cap == 0 and wanted)
        return plans

    def _propose(self, rows: list[Row], plans: list[Plan]) -> list[Proposal]:
        """Each proposer drafts for its rows; proposals are cut to their plans (engine/drafting.py)."""
        known = self.config.cost_rule and bool(self.pass_costs.verify.points)
        return propose(rows, plans, self.proposers, self.pass_costs.verify_seconds if known else None)

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
            # One row caught up: what the pass cost beyond its drafting steps is the catch-up. Each
            # token is priced at what it adds (its first step is a pass whatever it carries), so a
            # catch-up of a few tokens prices a token as a prompt's does, not as a step.
            p = model_rows[0]
            costs.observe_catch_up(p.fed, draft_s - p.chain * costs.draft_step(1))
        for r, plan, p, v in zip(rows, plans, proposals, verdicts):
            # A tree counts by depth: position j is reached when its path got to depth j.
            drafted = p.levels
            self.pooled(p.source, r.sampled).update(drafted, v.accepted, v.chances)
            r.acceptance.update(drafted, v.accepted, v.chances)
            if r.auto is not None and drafted:
                r.auto.update(p.source if p.source in r.auto.rules else plan.source, drafted, v.accepted, v.chances)

    def _commit(self, r: Row, proposal: Proposal, verdict: Verdict, draft_s: float, verify_s: float,
                stages: dict[str, float], prefilled: bool = False) -> bool:
        """Book one verified pass for a row and emit its tokens; True when the request is finished.
        A pass that also prefilled the row's prompt is booked as prefill."""
        stats = r.request.output.stats
        if prefilled:
            stats.prefill_s, verify_s = stats.prefill_s + verify_s, 0.0
        stats.record_pass(len(proposal.tokens), verdict.accepted, draft_s, verify_s, verdict.chances,
                          proposal.source, proposal.levels)
        if proposal.parents is not None:
            stats.record_tree(proposal.parents, verdict.path)
        elif r.tree and proposal.tokens:
            stats.tree["chain_passes"] += 1
        emitted, reason = r.commit(verdict.tokens, self.target.max_context, verdict.logprobs)
        stats.steps.append(StepRecord(time.perf_counter() - r.request.submitted_at, len(proposal.tokens),
                                      verdict.accepted, len(emitted), stages))
        if stats.target_passes == 1:
            stats.ttft_s = stats.steps[-1].end_s
        if reason is not None:
            r.finish(reason)
        r.notify(emitted)
        return reason is not None

    # -- learnt state ----------------------------------------------------------------------------

    def pooled(self, source: str, sampled: bool = False) -> AcceptanceTracker:
        """A source's acceptance over recent requests of one kind, greedy or sampled (the prior of
        a new request's own). The two kinds are kept apart because their acceptance differs by
        rule, not by chance: a greedy draft is accepted where the argmaxes agree, a sampled one with
        chance min(1, p/q), and a lookup's token with the target's probability of it. A server
        with both kinds of traffic would otherwise start each request from the mix of the two."""
        key = (source, sampled)
        tracker = self.pooled_acceptance.get(key)
        if tracker is None:  # built only when missing: this runs every step
            a = self.config.acceptance
            measured = key in self.source_priors
            tracker = self.pooled_acceptance[key] = AcceptanceTracker(
                self.source_priors[key] if measured else a.prior,
                a.measured_prior_weight if measured else a.prior_weight, a.pooled_decay)
        return tracker

    def row_acceptance(self, source: str, sampled: bool = False) -> AcceptanceTracker:
        """A new request's own acceptance for a source, starting from the source's pooled one."""
        a = self.config.acceptance
        pooled = self.pooled(source, sampled)
        return AcceptanceTracker(pooled.conditional, a.prior_weight, a.row_decay, borrows=pooled.unjudged)

    def _auto_k(self, sources: tuple[str, ...], sampled: bool = False) -> SourceChoice:
        """A k="auto" request's rules, one per source, starting from the source's pooled acceptance."""
        knobs = self.config.auto_k
        return SourceChoice({source: AdaptiveK(
            k_max=knobs.k_max, k=min(knobs.k_start, knobs.k_max), min_confidence=knobs.min_confidence,
            grow=knobs.grow_after_full_block, shrink=knobs.shrink_after_rejection,
            acceptance=self.row_acceptance(source, sampled)) for source in sources},
            probe_every=knobs.probe_every_off_passes, optimism=knobs.probe_optimism)

    def calibrate(self) -> None:
        """Start the cost curves from a few timed passes (policy/calibration.py); call it while idle."""
        if not self.idle():
            raise RuntimeError("calibrate() needs an idle engine")
        draft = self.proposers.get("draft")
        calibrate(self.pass_costs, self.target, draft.runner if draft is not None else None)

