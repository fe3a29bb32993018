"""OpenAI-compatible HTTP server over the batched engine.

One worker thread runs the engine's `step()` whenever there is work (the same step `generate` runs);
HTTP handlers (asyncio) only validate, queue an engine Request, and read what the worker hands back
through an asyncio queue. A
client that goes away cancels its request, which leaves the batch before the next step.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..engine.engine import Engine
from ..engine.prompts import chat_ids
from ..engine.request import QueueFull, RequestError
from ..engine.request import Request as EngineRequest
from ..sampling.params import InvalidParameter
from .metrics import ServerMetrics
from .protocol import ERRORS, ChatRequest, CommonRequest, CompletionRequest, describe
from .responses import Chunks, TokenText, full_response


# How often the server's loops look again; none changes an output, only how soon a change is seen.
IDLE_RECHECK_S = 0.1  # an idle worker re-checks for work (a submit or cancel wakes it at once anyway)
DRAIN_POLL_S = 0.05  # shutdown: how often it looks whether the running requests have finished
CANCEL_POLL_S = 0.02  # shutdown: how often it looks whether the cancelled requests have left
CANCEL_WAIT_S = 10.0  # shutdown: the most it waits for cancelled requests and the worker thread
DISCONNECT_CHECK_S = 0.5  # a streaming response with nothing new asks this often whether its client left


class EngineWorker:
    """The one thread that drives the engine."""

    def __init__(self, engine: Engine, metrics: ServerMetrics):
        self.engine = engine
        self.metrics = metrics
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="specdecode-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit_all(self, reqs: list[EngineRequest]) -> None:
        """Queue a response's choices together (they join one step and share the prompt's prefill);
        if the queue cannot take them all, none is queued."""
        self.engine.submit_all(reqs)
        self.metrics.waiting.labels(**self.metrics.labels).set(self.engine.queued)
        self.wake.set()

    def cancel(self, req: EngineRequest) -> None:
        self.engine.cancel(req)
        self.wake.set()

    def _run(self) -> None:
        m = self.metrics
        while not self.stopping:
            if self.engine.idle():
                self.wake.wait(IDLE_RECHECK_S)
                self.wake.clear()
                continue
            self.engine.step()  # errors end the requests concerned, never this loop
            m.running.labels(**m.labels).set(self.engine.running)
            m.waiting.labels(**m.labels).set(self.engine.queued)
            if self.engine.policy.last_cap is not None:
                m.k_cap.labels(**m.labels).set(self.engine.policy.last_cap)

    def drain(self, grace_s: float) -> None:
        """Let running requests finish for up to grace_s, then cancel the rest and stop."""
        deadline = time.monotonic() + grace_s
        while not self.engine.idle() and time.monotonic() < deadline:
            time.sleep(DRAIN_POLL_S)
        for row in list(self.engine.rows):
            self.engine.cancel(row.request)
        for req in list(self.engine.waiting):
            self.engine.cancel(req)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not self.engine.idle() and time.monotonic() < deadline:
            self.wake.set()
            time.sleep(CANCEL_POLL_S)
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=CANCEL_WAIT_S)


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "param": param,
                                                               "code": status}})


class Rejected(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


SUFFIX_SCOPES = ("shared", "client", "off")


def create_app(engine: Engine, model_name: str, default_k: int | str = "auto", default_max_tokens: int = 256,
               shutdown_grace_s: float = 30.0, suffix_scope: str = "shared", logprobs_mode: str = "raw") -> FastAPI:
    """suffix_scope: whose earlier outputs the suffix proposer drafts from: every request's
    (shared), the same client's (its API key, else its `user` field; a request with neither uses no
    memory), or nobody's (off). logprobs_mode: the distribution logprobs report when a request does
    not say (verification/logprobs.py)."""
    if suffix_scope not in SUFFIX_SCOPES:
        raise ValueError(f"the suffix memory's scope is one of {', '.join(SUFFIX_SCOPES)}, got {suffix_scope!r}")
    metrics = ServerMetrics(model_name)
    suffix = engine.proposers.get("suffix")
    if suffix is not None:
        metrics.watch_suffix(suffix)
    if getattr(engine.target, "prefix_cache", None) is not None:
        metrics.watch_prefix_cache(engine.target.prefix_cache)
    worker = EngineWorker(engine, metrics)
    gen = engine
    text_of = TokenText(engine.tokenizer)
    state = {"draining": False}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        yield
        state["draining"] = True
        await asyncio.get_running_loop().run_in_executor(None, worker.drain, shutdown_grace_s)

    app = FastAPI(title="specdecode", lifespan=lifespan)
    app.state.engine, app.state.worker, app.state.metrics = engine, worker, metrics

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_request: Request, exc: RequestValidationError):
        metrics.reject("invalid")
        return error_response(400, "invalid request: " + describe(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        # Starlette's own refusals (a body it cannot parse, an unknown route or method) in the same
        # error shape as every other answer.
        response = error_response(exc.status_code, str(exc.detail), "invalid_request_error" if exc.status_code < 500
                                  else "server_error")
        response.headers.update(exc.headers or {})  # e.g. a 405's Allow
        return response

    @app.exception_handler(Rejected)
    async def rejected(_request: Request, exc: Rejected):
        metrics.reject("queue_full" if exc.status == 429 else "shutting_down" if exc.status == 503 else "invalid")
        return error_response(exc.status, exc.message, exc.kind)

    @app.get("/health")
    async def health():
        return {"status": "draining" if state["draining"] else "ok", "running": engine.running,
                "waiting": engine.queued}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "specdecode", "max_model_len": gen.target.max_context}]}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus():
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/completions", responses=ERRORS)
    async def completions(body: CompletionRequest, request: Request):
        prompt = body.prompt[0] if isinstance(body.prompt, list) and body.prompt and isinstance(body.prompt[0], str) \
            else body.prompt
        return await serve(body, request, lambda: gen.encode(prompt, chat=False), chat=False)

    @app.post("/v1/chat/completions", responses=ERRORS)
    async def chat(body: ChatRequest, request: Request):
        def encode():
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
            return chat_ids(gen.tokenizer, messages)
        return await serve(body, request, encode, chat=True)

    async def serve(body: CommonRequest, request: Request, encode, chat: bool):
        if state["draining"]:
            raise Rejected(503, "the server is shutting down", "server_error")
        if body.model is not None and body.model != model_name:
            raise Rejected(404, f"the model '{body.model}' does not exist here; this server serves '{model_name}'",
                           "not_found_error")
        problem = body.unsupported()
        if problem:
            raise Rejected(400, problem)
        try:
            prompt_ids = encode()
            reqs = requests(body, request, prompt_ids, chat)
        except (InvalidParameter, RequestError, ValueError) as exc:
            raise Rejected(400, str(exc)) from None
        events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        for i, req in enumerate(reqs):
            req.on_step = _bridge(loop, events, metrics, i)
        try:
            worker.submit_all(reqs)  # checks every choice (engine.check) before queuing any
        except QueueFull as exc:
            raise Rejected(429, str(exc), "rate_limit_error") from None
        except (InvalidParameter, RequestError, ValueError) as exc:
            raise Rejected(400, str(exc)) from None
        metrics.prompt_tokens.labels(**metrics.labels).inc(len(prompt_ids))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        if body.stream:
            opts = body.stream_options
            chunks = Chunks(reqs, rid, model_name, chat, text_of, bool(opts and opts.continuous_usage_stats))
            return StreamingResponse(_sse(reqs, events, request, worker, chunks, bool(opts and opts.include_usage)),
                                     media_type="text/event-stream")
        texts = [[] for _ in reqs]
        async for i, tokens, delta, done, entries in _events(reqs, events, request, worker):
            texts[i].append(delta)
        failed = [r for r in reqs if r.finish_reason == "error"]
        if failed:
            return error_response(500, f"generation failed: {failed[0].error}", "server_error")
        return full_response(reqs, ["".join(t) for t in texts], rid, model_name, chat, text_of)

    def requests(body: CommonRequest, request: Request, prompt_ids: list[int], chat: bool) -> list[EngineRequest]:
        """The body's n choices as engine requests (choice i of a seeded request uses seed + i)."""
        room = gen.target.max_context - len(prompt_ids) - 1
        wanted = body.max_completion_tokens if chat and getattr(body, "max_completion_tokens", None) else \
            body.max_tokens
        if wanted is not None and wanted < 1:
            raise InvalidParameter(f"max_tokens must be >= 1, got {wanted}")
        max_new = min(wanted or default_max_tokens, max(room, 1))
        spec, grammar, top = body.speculative, body.grammar(), body.top()
        tenant, remember = _tenant(suffix_scope, request, body.user)
        return [EngineRequest(prompt_ids, body.sampling(max_new, i),
                              k=spec.k if spec and spec.k is not None else default_k,
                              proposer=spec.proposer if spec else None,
                              verifier=spec.verifier if spec else "token", tree=spec.tree if spec else 0,
                              grammar=grammar, logprobs=top, logprobs_mode=body.logprobs_mode or logprobs_mode,
                              tenant=tenant, remember=remember)
                for i in range(body.n)]

    return app


def _tenant(scope: str, request: Request, user: str | None) -> tuple[str | None, bool]:
    """(tenant, remember) of a request's suffix memory under the server's scope. API keys are kept
    only as a hash."""
    if scope == "shared":
        return None, True
    if scope == "client":
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and auth[7:].strip():
            return "key:" + hashlib.sha256(auth[7:].strip().encode()).hexdigest()[:16], True
        if user:
            return "user:" + user, True
    return None, False


def _bridge(loop: asyncio.AbstractEventLoop, events: asyncio.Queue, metrics: ServerMetrics, index: int):
    """on_step for the worker thread: book metrics, hand the step (with its tokens' logprobs) to the
    response's asyncio queue, tagged with the choice's index."""
    seen = {"steps": 0, "last_end": 0.0}

    def on_step(req: EngineRequest, tokens: list[int], delta: str) -> None:
        for step in req.stats.steps[seen["steps"]:]:
            metrics.step(step.drafted, step.accepted, step.emitted, step.end_s - seen["last_end"],
                         first=seen["last_end"] == 0.0)
            seen["last_end"] = step.end_s
        seen["steps"] = len(req.stats.steps)
        if req.done:
            metrics.finish(req.finish_reason, time.perf_counter() - req.submitted_at)
        entries = req.token_logprobs[len(req.generated) - len(tokens): len(req.generated)] if tokens else []
        loop.call_soon_threadsafe(events.put_nowait, (index, list(tokens), delta, req.done, entries))

    return on_step


async def _events(reqs: list[EngineRequest], events: asyncio.Queue, request: Request,
                  worker: EngineWorker) -> AsyncIterator[tuple]:
    """The choices' steps as they come, until every choice is done; a client that disconnects
    cancels them all."""
    open_choices = set(range(len(reqs)))
    try:
        while open_choices:
            try:
                item = await asyncio.wait_for(events.get(), timeout=DISCONNECT_CHECK_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return
                continue
            yield item
            if item[3]:
                open_choices.discard(item[0])
    finally:
        for req in reqs:
            if not req.done:  # disconnect, cancellation of this task, or server shutdown
                worker.cancel(req)


async def _sse(reqs, events, request, worker, chunks: Chunks, include_usage: bool) -> AsyncIterator[str]:
    if chunks.chat:
        yield chunks.roles()
    async for i, tokens, delta, done, entries in _events(reqs, events, request, worker):
        if reqs[i].finish_reason == "error":
            err = {"error": {"message": f"generation failed: {reqs[i].error}", "type": "server_error", "code": 500}}
            yield f"data: {json.dumps(err)}\n\n"
            break
        if delta or tokens:
            yield chunks.step(i, delta, entries)
        if done:
            yield chunks.finish(i)
    if include_usage and all(r.done for r in reqs):
        yield chunks.usage()
    yield "data: [DONE]\n\n"
