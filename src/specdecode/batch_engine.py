"""Continuous batching: many requests decode together, each with its own proposer, k, sampling
parameters, random generator and stop rules.

One `step()`, top to bottom (the batched twin of SpeculativeGenerator.generate):
    admit waiting requests: prefill each alone, its cache joins the batch (rows join and leave)
    -> n-gram rows look up their drafts (cheap); the load policy caps this step's k
    -> draft-model rows draft together, one batched draft pass per position
    -> one batched target pass scores every row's last token + its drafts (ragged widths)
    -> each row's own rejection step with its own generator (exact, and independent of the batch)
    -> each cache forgets its row's rejected drafts (a mask, nothing copied)
    -> emit, stop checks, stream; finished or cancelled rows leave and free their slot

It is driven by one thread (the server's worker); `submit` and `cancel` may be called from others.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .adaptive import AdaptiveK
from .backends.hf_batch import BatchRunner
from .engine import GenerationStats, RequestError, SpeculativeGenerator, StepRecord, check_k, verify_drafts
from .load_policy import AcceptanceTracker, CostCurve, LoadPolicy, RowPlan
from .loading import torch_model
from .models import ModelError
from .proposers.draft import common_prefix, next_draft
from .sampling import SamplingParams
from .textstream import TextStream

log = logging.getLogger(__name__)

_ids = itertools.count(1)
REJOIN_AFTER = 16  # draft tokens a row may be behind before it is re-prefilled alone

# on_step(request, tokens emitted this step, text that became final with them); after the last
# step request.finish_reason is set (or request.error).
OnStep = Callable[["BatchRequest", list[int], str], None]


@dataclass(eq=False)
class BatchRequest:
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    k: int | str = 4
    proposer: str | None = None  # None: the generator's default
    on_step: OnStep | None = None
    id: int = field(default_factory=lambda: next(_ids))

    # Filled in by the engine.
    generated: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None  # stop | length | abort | error
    error: str | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)
    submitted_at: float = field(default_factory=time.perf_counter)
    cancelled: bool = False

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass(eq=False)
class _Row:
    """A request while it is in the batch."""

    req: BatchRequest
    proposer: str
    context: list[int]
    generator: torch.Generator
    stop_ids: set[int]
    text: TextStream
    adaptive: AdaptiveK | None
    acceptance: AcceptanceTracker
    pending: list[str] = field(default_factory=list)  # text deltas of this step
    draft_cached: list[int] = field(default_factory=list)  # tokens in the draft model's cache row
    in_draft: bool = False  # has a row in the draft model's batch


BATCHED_PROPOSERS = ("draft", "ngram", "none")


class BatchEngine:
    def __init__(self, gen: SpeculativeGenerator, max_batch: int = 8, max_waiting: int = 64,
                 load_policy: bool = True, calibrate: bool = True):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        drafter = gen.proposers.get("draft")
        for role, runner in (("target", gen.target), ("draft", drafter.runner if drafter else None)):
            if runner is not None and torch_model(runner) is None:
                raise ModelError(f"batched serving keeps one KV cache for many requests, which the {role}'s "
                                 f"{type(runner).__name__} backend does not offer: load the {role} with hf:")
        self.gen = gen
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        self.target = BatchRunner(torch_model(gen.target))
        self.draft = BatchRunner(torch_model(drafter.runner)) if drafter is not None else None
        self.rows: list[_Row] = []  # target cache rows, in order
        self.draft_rows: list[_Row] = []  # draft cache rows, in order (draft-model requests only)
        self.waiting: deque[BatchRequest] = deque()
        self._lock = threading.Lock()
        self.policy = LoadPolicy(CostCurve(), CostCurve(), enabled=load_policy)
        # Acceptance of each proposer over all recent requests: a new row starts from it rather
        # than from a guess, so a proposer that does not pay here is not tried afresh per request.
        self.pooled = {name: AcceptanceTracker(decay=0.98) for name in gen.proposers}
        self.counters = {"steps": 0, "speculation_off_steps": 0, "admitted": 0, "finished": 0, "aborted": 0}
        if calibrate:
            self.calibrate()

    # -- requests in and out (any thread) ------------------------------------------------------

    def check(self, req: BatchRequest) -> None:
        """Raise RequestError/InvalidParameter for a request that can never run."""
        self.gen.get_proposer(req.proposer)
        if (req.proposer or self.gen.default_proposer) not in BATCHED_PROPOSERS:
            raise RequestError(f"the batched server runs the proposers {', '.join(BATCHED_PROPOSERS)}, not "
                               f"'{req.proposer or self.gen.default_proposer}': ask for one of them (the hybrid "
                               "runs in generate and bench)")
        check_k(req.k)
        if not req.prompt_ids:
            raise RequestError("the prompt is empty")
        limit = self.gen.target.max_context
        if len(req.prompt_ids) + 1 > limit:
            raise RequestError(f"the prompt has {len(req.prompt_ids)} tokens but the target's context is {limit}: "
                               "shorten the prompt")

    def submit(self, req: BatchRequest) -> None:
        """Queue a request; raises QueueFull when more requests wait than max_waiting allows."""
        self.check(req)
        with self._lock:
            if len(self.waiting) >= self.max_waiting:
                raise QueueFull(f"{len(self.waiting)} requests are already waiting (limit {self.max_waiting}); "
                                "retry later")
            req.submitted_at = time.perf_counter()
            self.waiting.append(req)

    def cancel(self, req: BatchRequest) -> None:
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

    # -- the step (the worker thread) ----------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        self._leave([row for row in self.rows if row.req.cancelled], "abort")
        self._admit()
        if not self.rows:
            return
        try:
            self._step()
        except Exception as exc:
            # The requests in the batch get the message; the operator gets the traceback.
            log.exception("batched step failed; ending the %d running requests", len(self.rows))
            self.fail_running(f"{type(exc).__name__}: {exc}")

    def _step(self) -> None:
        t0 = time.perf_counter()
        plans, ngram_drafts = self._plan()
        cap = self.policy.cap(plans)
        self.counters["steps"] += 1
        self.counters["speculation_off_steps"] += int(cap == 0 and any(p.wanted for p in plans))
        wanted = [min(cap, p.wanted) for p in plans]
        drafts, qs = self._draft(wanted, ngram_drafts)
        t1 = time.perf_counter()

        feeds = [[row.context[-1]] + d for row, d in zip(self.rows, drafts)]
        logits, _ = self.target.forward(feeds)
        results = [verify_drafts(logits[b], drafts[b], qs[b], row.req.params, row.generator)
                   for b, row in enumerate(self.rows)]
        self.target.rollback([len(d) - accepted for d, (_, accepted, _) in zip(drafts, results)])
        t2 = time.perf_counter()
        self.policy.observe_verify(len(feeds), max(len(f) for f in feeds), t2 - t1)

        finished = []
        for row, d, (tokens, accepted, _) in zip(self.rows, drafts, results):
            if self._commit(row, d, tokens, accepted, t1 - t0, t2 - t1):
                finished.append(row)
        self._leave(finished, None)

    def run_until_idle(self) -> None:
        while not self.idle():
            self.step()

    # -- pieces of the step ----------------------------------------------------------------------

    def _admit(self) -> None:
        while len(self.rows) < self.max_batch:
            with self._lock:
                if not self.waiting:
                    return
                req = self.waiting.popleft()
            if req.cancelled:
                self._finish_unstarted(req, "abort")
                continue
            try:
                self._join(req)
            except Exception as exc:  # one bad request must not take the batch down
                log.warning("request %s failed at admission: %s: %s", req.id, type(exc).__name__, exc)
                req.error = f"{type(exc).__name__}: {exc}"
                self._finish_unstarted(req, "error")

    def _join(self, req: BatchRequest) -> None:
        start = time.perf_counter()
        name = req.proposer or self.gen.default_proposer
        params = req.params
        stats = req.stats
        stats.prompt_tokens = len(req.prompt_ids)
        acceptance = AcceptanceTracker(prior=self.pooled[name].conditional)
        row = _Row(
            req=req, proposer=name, context=list(req.prompt_ids), generator=params.make_generator(),
            stop_ids=set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.gen.eos_token_ids)),
            text=None,  # set below, it needs the row for its callback
            # The controller keeps the row's own tracker, which the load policy reads too.
            adaptive=AdaptiveK(k_max=self.gen.auto_k_max, min_confidence=self.gen.auto_min_confidence,
                               acceptance=acceptance) if req.k == "auto" else None,
            acceptance=acceptance,
        )
        row.text = TextStream(self.gen.tokenizer, params.stop, lambda _t, delta: row.pending.append(delta))
        # Like the one-request loop: everything but the last prompt token is prefilled, the last
        # one goes with the first drafts so that the first token is verified like all others.
        prefix = req.prompt_ids[:-1]
        self.target.add_row(prefix)
        self.rows.append(row)
        stats.prefill_s = time.perf_counter() - start
        self.counters["admitted"] += 1

    def _plan(self) -> tuple[list[RowPlan], list[list[int] | None]]:
        plans, ngram = [], []
        limit = self.gen.target.max_context
        for row in self.rows:
            own = row.adaptive.k if row.adaptive else row.req.k
            room = limit - len(row.context) - 1
            k = max(0, min(own, row.req.params.max_new_tokens - len(row.req.generated) - 1, room))
            drafts = None
            if row.proposer == "ngram":
                drafts = self.gen.proposers["ngram"].propose(row.context, k, row.req.params, row.generator).tokens
                k = len(drafts)
            elif row.proposer == "none":
                k = 0
            plans.append(RowPlan(k, row.acceptance, row.proposer == "draft"))
            ngram.append(drafts)
        return plans, ngram

    def _draft(self, wanted: list[int], ngram: list[list[int] | None]) -> tuple[list[list[int]], list]:
        drafts: list[list[int]] = [list(d[:w]) if d is not None else [] for d, w in zip(ngram, wanted)]
        qs: list[list[torch.Tensor] | None] = [None] * len(self.rows)
        index = {id(row): b for b, row in enumerate(self.rows)}
        if any(w and row.proposer == "draft" for w, row in zip(wanted, self.rows)):
            self._draft_model(wanted, drafts, qs, index)
        out_q = []
        for d, q in zip(drafts, qs):
            out_q.append(torch.stack(q[: len(d)]).unsqueeze(0) if q else None)
        return drafts, out_q

    def _draft_model(self, wanted, drafts, qs, index) -> None:
        """All draft-model rows draft together: the first pass also catches each row up on the
        tokens it has not seen (the last accepted ones) after forgetting its rejected drafts."""
        self._join_draft_batch(wanted, index)
        rows = self.draft_rows
        goal = [wanted[index[id(r)]] for r in rows]
        feeds: list[list[int]] = []
        drop = []
        for row, g in zip(rows, goal):
            if g == 0:
                feeds.append([])
                drop.append(0)
                continue
            keep = min(common_prefix(row.draft_cached, row.context), len(row.context) - 1)
            drop.append(len(row.draft_cached) - keep)
            del row.draft_cached[keep:]
            feeds.append(row.context[keep:])
        self.draft.rollback(drop)
        confidence = self.gen.auto_min_confidence
        start, positions, drafting = time.perf_counter(), 0, sum(1 for f in feeds if f)
        for _ in range(max(goal)):
            if not any(feeds):
                break
            positions += 1
            logits, lengths = self.draft.forward(feeds)
            for i, row in enumerate(rows):
                if not feeds[i]:
                    continue
                row.draft_cached.extend(feeds[i])
                b = index[id(row)]
                mine = drafts[b]
                token, q, sure = next_draft(logits[i, len(feeds[i]) - 1], row.req.params, row.generator,
                                            self.target.vocab_size, confidence if row.adaptive else 0.0)
                feeds[i] = []
                mine.append(token)
                if q is not None:
                    qs[b] = (qs[b] or []) + [q]
                if sure and len(mine) < goal[i]:
                    feeds[i] = [token]
        if positions:
            # What one more draft position costs the step, sampling and bookkeeping included.
            self.policy.draft.observe(drafting, (time.perf_counter() - start) / positions)

    def _join_draft_batch(self, wanted, index) -> None:
        """A row joins the draft batch when it first drafts, so a request that never speculates
        (the load policy said no) costs the draft model nothing. A row that fell far behind (long
        without drafting) rejoins: its catch-up is prefilled alone instead of padding every other
        row's draft pass to its length."""
        for row in self.rows:
            if row.proposer != "draft" or wanted[index[id(row)]] == 0:
                continue
            behind = len(row.context) - 1 - common_prefix(row.draft_cached, row.context)
            if row.in_draft and behind <= REJOIN_AFTER:
                continue
            if row.in_draft:
                self._remove_draft_rows([row])
            self.draft.add_row(row.context[:-1])
            row.draft_cached = list(row.context[:-1])
            row.in_draft = True
            self.draft_rows.append(row)

    def _remove_draft_rows(self, rows: list[_Row]) -> None:
        if not rows:  # also: no draft model loaded at all
            return
        gone = {id(r) for r in rows}
        self.draft.remove_rows([i for i, r in enumerate(self.draft_rows) if id(r) in gone])
        self.draft_rows = [r for r in self.draft_rows if id(r) not in gone]
        for r in rows:
            r.in_draft = False

    def _commit(self, row: _Row, drafts: list[int], tokens: list[int], accepted: int, draft_s: float,
                verify_s: float) -> bool:
        """Book one verified step for a row and emit its tokens; True when the request is finished."""
        req, stats = row.req, row.req.stats
        stats.record_pass(len(drafts), accepted, draft_s, verify_s)
        self.pooled[row.proposer].update(len(drafts), accepted)
        if row.adaptive:
            row.adaptive.update(len(drafts), accepted)  # the row's acceptance too: they share it
        else:
            row.acceptance.update(len(drafts), accepted)
        done = False
        emitted = []
        for token in tokens:
            row.context.append(token)
            emitted.append(token)
            done = SpeculativeGenerator._emit(token, req.generated, row.text, row.stop_ids, req.params, stats)
            if done:
                break
        if not done and len(row.context) + 1 > self.gen.target.max_context:
            stats.finish_reason, done = "length", True
        now = time.perf_counter() - req.submitted_at
        stats.steps.append(StepRecord(now, len(drafts), accepted, len(emitted)))
        if stats.target_passes == 1:
            stats.ttft_s = now
        if done:
            req.text = row.text.finish()
        delta = "".join(row.pending)
        row.pending.clear()
        if done:
            stats.total_s = now
            stats.new_tokens = len(req.generated)
            req.finish_reason = stats.finish_reason
        self._notify(req, emitted, delta)
        return done

    def _leave(self, rows: list[_Row], reason: str | None) -> None:
        if not rows:
            return
        gone = {id(r) for r in rows}
        self._remove_target_rows([b for b, r in enumerate(self.rows) if id(r) in gone])
        self._remove_draft_rows([r for r in rows if r.in_draft])
        for row in rows:
            if reason is not None:  # cancelled: finished here rather than by its own stop rule
                req = row.req
                req.text = row.text.text
                req.stats.total_s = time.perf_counter() - req.submitted_at
                req.stats.new_tokens = len(req.generated)
                req.finish_reason = req.stats.finish_reason = reason
                self.counters["aborted"] += 1
                self._notify(req, [], "")
            else:
                self.counters["finished"] += 1

    def _remove_target_rows(self, indices: list[int]) -> None:
        self.target.remove_rows(indices)
        drop = set(indices)
        self.rows = [r for b, r in enumerate(self.rows) if b not in drop]

    def _finish_unstarted(self, req: BatchRequest, reason: str) -> None:
        req.finish_reason = req.stats.finish_reason = reason
        self.counters["aborted" if reason == "abort" else "finished"] += 1
        self._notify(req, [], "")

    @staticmethod
    def _notify(req: BatchRequest, tokens: list[int], text: str) -> None:
        if req.on_step is not None:
            try:
                req.on_step(req, tokens, text)
            except Exception:  # a broken consumer loses its own stream, not the batch
                req.cancelled = True

    # -- costs -------------------------------------------------------------------------------------

    @torch.inference_mode()
    def calibrate(self, widths: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> None:
        """Time a few target (and draft) passes of growing width on a scratch runner, to start the
        load policy's cost curves; real passes refine them afterwards."""
        for runner, curve, sizes in ((self.target, self.policy.verify, widths),
                                     (self.draft, self.policy.draft, widths[:4])):
            if runner is None:
                continue
            scratch = BatchRunner(runner.model)
            scratch.add_row(list(range(1, 17)))
            scratch.forward([[1]])  # warm-up, not booked
            scratch.rollback([1])
            for w in sizes:
                t = time.perf_counter()
                scratch.forward([list(range(1, w + 1))])
                curve.observe(w, time.perf_counter() - t)
                scratch.rollback([w])

    def fail_running(self, error: str) -> None:
        """A batched pass failed (a bug or out of memory): end the requests in it with an error and
        start from empty caches, so that the server and the queued requests carry on."""
        rows, self.rows, self.draft_rows = self.rows, [], []
        self.target = BatchRunner(self.target.model)
        if self.draft is not None:
            self.draft = BatchRunner(self.draft.model)
        for row in rows:
            row.req.error = error
            row.req.finish_reason = row.req.stats.finish_reason = "error"
            self.counters["finished"] += 1
            self._notify(row.req, [], "")


class QueueFull(RuntimeError):
    """More requests are waiting than the server allows; the client should retry later."""


def generate_batch(engine: BatchEngine, requests: list[BatchRequest]) -> list[BatchRequest]:
    """Run requests to completion on one engine (offline use and tests)."""
    for req in requests:
        engine.submit(req)
    engine.run_until_idle()
    return requests
