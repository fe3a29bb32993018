"""Requests in and out of the engine's batch: checks and queueing (any thread), admission with one
prefill per shared prompt, and rows leaving (finished, aborted, or failed with the step).

`Engine` (engine/engine.py) is a Scheduler: these methods share its rows, queue, target and
proposers; the step itself, and what it learns, live there.
"""

from __future__ import annotations

import logging
import time

from ..sampling.constraints import GrammarCompiler
from ..sampling.params import InvalidParameter
from .request import QueueFull, Request
from .row import Row

log = logging.getLogger(__name__)


class Scheduler:
    """The batch's membership; the engine provides rows, waiting, target, proposers, config, counters."""

    # -- requests in and out (any thread) --------------------------------------------------------

    def check(self, req: Request) -> None:
        """Raise RequestError/InvalidParameter for a request that can never run."""
        self.get_proposer(req.proposer)
        if req.tree and not getattr(self.target, "trees", False):
            raise InvalidParameter(f"tree drafting needs tree attention in the target, and the "
                                   f"{self.target.backend} target scores chains only: use tree 0, or a transformers "
                                   f"or llama.cpp target")
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

    # -- joining and leaving the batch (the step's thread) ---------------------------------------

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
                    req.output.fail(exc)
                    self._finish_unstarted(req, "error")

    def _join(self, group: list[Request]) -> None:
        start = time.perf_counter()
        prompt = group[0].prompt_ids
        rows = []
        for req in group:
            proposer = self.get_proposer(req.proposer)
            sampled = not req.params.greedy
            row = Row(req, self.tokenizer, self.eos_token_ids, self.row_acceptance(proposer.sources[0], sampled),
                      self.target.vocab_size, not proposer.uses_draft_model,
                      self.grammars().compile(req.grammar) if req.grammar is not None else None,
                      req.proposer or self.default_proposer)
            if req.k == "auto":
                row.auto = self._auto_k(proposer.sources, sampled)
            rows.append(row)
        # Everything but the last prompt token is prefilled: the first pass feeds that one with the
        # first drafts, so every emitted token, the first included, goes through the same rejection step.
        # A request alone in the batch, on a runner that can, is prefilled within that first pass
        # (one pass, not two); a prefill that fails then ends no other request.
        within_pass = len(group) == 1 and not self.rows and not group[0].tree and self.target_prefills_in_pass
        self.target.add_rows([] if within_pass else prompt[:-1], len(group))
        if within_pass:
            rows[0].unfed = list(prompt[:-1])
        by_proposer: dict[str, list[Row]] = {}
        for row in rows:
            by_proposer.setdefault(row.proposer, []).append(row)
        try:
            for name, members in by_proposer.items():
                if any(r.request.k != 0 for r in members):
                    self.proposers[name].join(members)
        except Exception:
            self.target.remove_rows(list(range(len(self.rows), len(self.rows) + len(group))))
            for name, members in by_proposer.items():
                self.proposers[name].leave(members)
            raise
        self.rows.extend(rows)
        for req in group:
            req.output.stats.prefill_s = time.perf_counter() - start
        self.counters["admitted"] += len(group)

    @property
    def target_prefills_in_pass(self) -> bool:
        """A chain's first pass may carry its prompt (a tree pass never does: forward takes one or the other)."""
        return getattr(self.target, "prefills_in_pass", False)

    def _leave(self, rows: list[Row], reason: str | None) -> None:
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
        req.close(reason, "")
        self.counters["aborted" if reason == "abort" else "finished"] += 1
        req.notify([], "")

    def fail_running(self, exc: BaseException) -> None:
        """A batched pass failed (a bug or out of memory): end the requests in it with an error and
        start from empty caches, so that the server and the queued requests carry on."""
        rows, self.rows = self.rows, []
        try:
            self.target.remove_rows(list(range(self.target.rows)))
        except Exception:
            log.exception("could not empty the target's cache after a failed step")
        for proposer in self.proposers.values():
            proposer.clear()
        for r in rows:
            r.request.output.fail(exc)
            r.finish("error")
            self.counters["finished"] += 1
            r.notify([])

