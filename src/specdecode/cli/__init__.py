"""Command-line interface: `specdecode generate | verify | bench | profile | tune | plan | serve | demo | models`.

The commands map flags to calls and render the results; what they run lives in the library
(engine, bench, tune, plan, verify, server). This package holds the app and the flags they share;
run.py, serve.py, bench.py and advise.py the commands, endpoints.py their modes for running servers
(--endpoint), render.py the tables they print.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from ..engine.request import RequestError
from ..models.registry import ModelError
from ..proposers import DEFAULT_PROPOSER
from ..sampling.params import InvalidParameter, SamplingParams

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Exact speculative decoding: generate, verify, benchmark, tune and plan.")
out = Console()
err = Console(stderr=True)

# Errors a user can fix: printed as one line, exit code 2, no traceback.
USER_ERRORS = (ModelError, InvalidParameter, RequestError, ValueError, FileNotFoundError)


def refuse_unused(ctx: typer.Context, names: tuple[str, ...], when: str) -> None:
    """Refuse options given on the command line that this mode does not read: an option the user
    set and the command then ignored would be a silent wrong answer. names: the parameters, each
    named in the message by its flag as the command declares it; when: the mode and what to do,
    after "have no effect" ("{them}" names the options)."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    # By the enum's name: typer ships its own copy of click, whose enum is not click's.
    given = [flags[name] for name in names
             if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"]
    if given:
        one = len(given) == 1
        raise InvalidParameter(f"{', '.join(given)} {'has' if one else 'have'} no effect "
                               + when.format(them="it" if one else "them"))


def parse_k(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        k = int(value)
    except ValueError:
        raise InvalidParameter(f"--k must be a whole number >= 0 or 'auto', got {value!r}") from None
    if k < 0:
        raise InvalidParameter(f"--k must be >= 0, got {k}")
    return k


def sampling_from_flags(max_new_tokens, temperature, top_k, top_p, min_p, seed, stop=None, ignore_eos=False,
                        sampler=None):
    return SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                          min_p=min_p, seed=seed, stop=tuple(stop or ()), ignore_eos=ignore_eos, sampler=sampler)


def summary_line(stats: dict, proposer: str, k: int) -> str:
    line = (f"[{proposer}, k={k}] {stats['new_tokens']} tokens in {stats['total_s']:.2f}s: "
            f"{stats['tokens_per_s']:.2f} tok/s, TTFT {stats['ttft_s'] * 1000:.0f} ms")
    if proposer != "none":
        line += (f", acceptance {stats['acceptance_rate']:.1%}, "
                 f"mean accepted {stats['mean_accepted_tokens']:.2f} tokens/pass")
    return line


def from_config(path, target, draft, proposer, dtype, draft_dtype, k, draft_context):
    """A `tune --save` file's choices replace the flags: (target, draft, proposer, dtype, draft_dtype, k,
    draft_context)."""
    from ..advise.tune import load_config

    saved = load_config(path)
    return (saved.get("target", target), saved.get("draft") or draft, saved.get("proposer", proposer),
            saved.get("dtype", dtype), saved.get("draft_dtype", draft_dtype), str(saved.get("k", k)),
            saved.get("draft_context", draft_context))


Target = typer.Option("auto", "--target", help="target model: auto (the default model on the runtime and quantisation "
                      "measured fastest for speculative decoding here; measured once, cached), default (torch), "
                      "llamacpp:default@q4_0, a directory, a .gguf file or a cached HF id")


Draft = typer.Option("auto", "--draft", help="draft model (for --proposer draft): auto (the default draft on the "
                     "runtime, quantisation and shortlist measured fastest beside this target here; measured once, "
                     "cached), default (the torch draft), llamacpp:default@q4_0+v32k, a directory or a .gguf file")


Proposer = typer.Option(DEFAULT_PROPOSER, "--proposer", help="draft | ngram | suffix (matches in this and earlier "
                        "outputs) | hybrid (n-gram lookup, else the draft) | hybrid-suffix (suffix, else the draft) | none")


SuffixTokens = typer.Option(100_000, "--suffix-cache-tokens", help="tokens of recent outputs the suffix proposer "
                            "remembers across requests (0: none)")


DType = typer.Option("auto", "--dtype", help="auto | bfloat16 (bf16) | float32 (fp32) | int8 (dynamic int8 linears) | w8a8 (int8 linears, rows independent); auto = the faster of bf16 and fp32 on this machine (timed once, cached)")


Device = typer.Option("auto", "--device", help="cpu | cuda | cuda:N | auto (a GPU when torch sees one, else the "
                      "CPU): where the target and draft run; sampling stays on the CPU, so seeded output is the "
                      "same on every device")


DraftDType = typer.Option(None, "--draft-dtype", help="dtype of the draft model (default: --dtype); int8 is cheap")


DraftContext = typer.Option(0, "--draft-context", help="the draft model sees only the last N prompt tokens "
                            "(0: all): a shorter draft prefill, the output distribution unchanged")


Sampler = typer.Option(None, "--sampler", help="standard | invariant (the same tokens for a seed whatever the "
                       "proposer, k or batch); default: invariant when --seed is given")


def check_draft_context(n: int | None) -> int | None:
    if n is None:
        return None
    if not isinstance(n, int) or n < 0:
        raise InvalidParameter(f"--draft-context is a number of prompt tokens >= 1, or 0 for the whole prompt; got {n}")
    return n or None


def check_prefix_tokens(n: int) -> int:
    if n < 0:
        raise InvalidParameter(f"--prefix-cache-tokens must be >= 0 (0: no prefix cache), got {n}")
    return n


def check_suffix_tokens(n: int) -> int:
    if n < 0:
        raise InvalidParameter(f"--suffix-cache-tokens must be >= 0 (0: no memory), got {n}")
    return n


def parse_list(value: str, kind, flag: str) -> list:
    try:
        items = [kind(x.strip()) for x in value.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameter(f"{flag} takes a comma-separated list of {kind.__name__}, got {value!r}") from None
    if not items:
        raise InvalidParameter(f"{flag} is empty")
    return items


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
    except Exception as exc:  # a bug, not bad input: still one line, with the way to see more
        if debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (set SPECDECODE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()


# The commands register themselves on `app`.
from . import advise, bench, profile, report, run, serve  # noqa: E402,F401
