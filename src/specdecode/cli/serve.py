"""`specdecode serve`: the OpenAI-compatible server over the engine (server/)."""

from __future__ import annotations

import os
from typing import Optional

import typer

from ..models.registry import ModelError
from ..sampling.params import InvalidParameter
from . import (Device, DType, Draft, DraftContext, DraftDType, Proposer, SuffixTokens, Target, app,
               check_draft_context, check_prefix_tokens, check_suffix_tokens, err, from_config, parse_k)


@app.command()
def serve(
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("auto", "--k", help="default tokens drafted per step, or auto (chosen per pass by the cost model); requests may override it"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    device: str = Device,
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    max_batch: int = typer.Option(8, "--max-batch", help="requests decoded together"),
    max_waiting: int = typer.Option(64, "--max-waiting", help="queued requests beyond which the server answers 429"),
    load_policy: str = typer.Option("on", "--load-policy", help="on: lower k or stop speculating when it stops "
                                                                "paying for the batch; off: always the asked k"),
    max_tokens: int = typer.Option(256, "--max-tokens", help="default max_tokens when a request gives none"),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name"),
    shutdown_timeout: float = typer.Option(30.0, "--shutdown-timeout", help="seconds in-flight requests get to "
                                                                            "finish on shutdown"),
    config: Optional[str] = typer.Option(None, "--config", help="a `tune --save` file"),
    draft_context: int = DraftContext,
    suffix_cache_tokens: int = SuffixTokens,
    suffix_scope: str = typer.Option("shared", "--suffix-scope", help="whose earlier outputs the suffix proposer "
                                     "drafts from: shared (every request's) | client (the same API key or `user`) "
                                     "| off"),
    prefix_cache_tokens: int = typer.Option(4096, "--prefix-cache-tokens", help="tokens of recent prompts whose "
                                            "KV the transformers target and draft keep each, for prompts that start "
                                            "alike (a system prompt, earlier chat turns); 0: off"),
    naive_residual: bool = typer.Option(False, "--naive-residual", hidden=True, help="WRONG on purpose: resample "
                                        "rejections from p (a negative control for verify --endpoint)"),
    logprobs_mode: str = typer.Option("raw", "--logprobs-mode", help="the distribution logprobs report unless a "
                                      "request says: raw (the model's) | processed (after penalties, grammar, "
                                      "temperature, top-k/p)"),
):
    """OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /v1/models, /health,
    /metrics) with continuous batching of exact speculative decoding."""
    try:
        import uvicorn

        from ..server import create_app
        from ..server.app import SUFFIX_SCOPES
    except ImportError as exc:
        raise InvalidParameter(f"the server needs the serve extra ({exc.name} is missing): "
                               "pip install 'specdecode[serve]'") from None
    from ..engine.engine import EngineConfig
    from ..models.generator import SpeculativeGenerator

    window = 0
    if config:
        target, draft, proposer, dtype, draft_dtype, k, window = from_config(config, target, draft, proposer,
                                                                             dtype, draft_dtype, k, 0)
    window = check_draft_context(draft_context) or window or None
    if load_policy not in ("on", "off"):
        raise InvalidParameter(f"--load-policy is on or off, got {load_policy!r}")
    if max_batch < 1 or max_waiting < 0 or max_tokens < 1:
        raise InvalidParameter("--max-batch and --max-tokens must be >= 1 and --max-waiting >= 0")
    if suffix_scope not in SUFFIX_SCOPES:
        raise InvalidParameter(f"--suffix-scope is one of {', '.join(SUFFIX_SCOPES)}, got {suffix_scope!r}")
    check_suffix_tokens(suffix_cache_tokens)
    check_prefix_tokens(prefix_cache_tokens)
    from ..verification.logprobs import MODES

    if logprobs_mode not in MODES:
        raise InvalidParameter(f"--logprobs-mode is one of {', '.join(MODES)}, got {logprobs_mode!r}")
    steps = parse_k(k)
    wrong = {}
    if naive_residual:
        from ..checks.naive import naive_rejection_sample, naive_tree_residual

        wrong = {"reject": naive_rejection_sample, "tree_residual": naive_tree_residual}
        err.print("--naive-residual: this server samples rejections from p, which is WRONG (a negative control)")
    engine_config = EngineConfig(max_batch=max_batch, max_waiting=max_waiting, load_policy=load_policy == "on", **wrong)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype, draft_context=window,
                                               suffix_memory=0 if suffix_scope == "off" else suffix_cache_tokens,
                                               prefix_cache=prefix_cache_tokens, config=engine_config, device=device)
    from ..policy.calibration import CalibrationError

    try:
        gen.calibrate()
    except CalibrationError as exc:
        raise ModelError(f"cannot serve --target {target} --draft {draft}: {exc}") from None
    gen.grammars()  # llguidance's view of the vocabulary (about a second), paid before the first request
    engine = gen
    name = served_model_name or ("specdecode/" + os.path.basename(str(target).rstrip("/")))
    app_ = create_app(engine, name, default_k=steps, default_max_tokens=max_tokens, shutdown_grace_s=shutdown_timeout,
                      suffix_scope=suffix_scope, logprobs_mode=logprobs_mode)
    err.print(f"serving {name} (target {gen.target.backend}{' ' + gen.info['dtype'] if gen.target.backend.startswith('torch') else ''}, proposer {proposer}, k={steps}, max batch "
              f"{max_batch}, load policy {load_policy}) on http://{host}:{port}", highlight=False)
    uvicorn.run(app_, host=host, port=port, log_level="warning", timeout_graceful_shutdown=shutdown_timeout)
