"""Milliseconds of one draft token (a one-token llama.cpp decode after a 200-token context, logits
widened to the full vocabulary as the proposer sees them) for the default llama.cpp draft with its
full vocabulary and with shortlists, in alternating rounds so that the machine's drift hits all
alike; and the share of a held-out text's tokens each list covers. Median over rounds.

    python scripts/draft_cost.py OUT.json [draft spec ...]
"""

import json
import statistics
import sys
import time

from specdecode.models import shortlist
from specdecode.models.loader import load
from specdecode.models.registry import resolve

SPECS = ("llamacpp:default@q4_0", "llamacpp:default@q4_0+v48k", "llamacpp:default@q4_0+v32k",
         "llamacpp:default@q4_0+v16k")
ROUNDS, TOKENS = 5, 16


def timed_decode(runner, counting=lambda: True):
    """Wrap the llama.cpp runner's llama_decode with a clock (counting the calls for which
    `counting()` is true); returns a reader of seconds spent, which also unwraps it."""
    inner = getattr(runner, "inner", runner)
    lib = inner._lib
    spent = [0.0]

    class Timed:
        def __getattr__(self, name):
            return getattr(lib, name)

        def llama_decode(self, *args):
            start = time.perf_counter()
            try:
                return lib.llama_decode(*args)
            finally:
                if counting():
                    spent[0] += time.perf_counter() - start

    inner._lib = Timed()

    def read():
        inner._lib = lib
        return spent[0]

    return read


def main(path: str, specs: list[str]) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve("default", "draft").path))
    runners = {spec: load(spec, "draft", "auto")[0] for spec in specs}
    prompt = tokenizer("def quicksort(items):\n    " * 40)["input_ids"][:200]
    times: dict[str, list[float]] = {s: [] for s in specs}
    decode: dict[str, list[float]] = {s: [] for s in specs}
    for _ in range(ROUNDS):
        for spec, runner in runners.items():
            runner.add_rows(prompt)
            token = prompt[-1]
            in_decode = timed_decode(runner)
            start = time.perf_counter()
            for _ in range(TOKENS):
                token = int(runner.forward([[token]])[0][0].argmax())
            times[spec].append((time.perf_counter() - start) / TOKENS)
            decode[spec].append(in_decode() / TOKENS)
            runner.remove_rows([0])
    # ms_per_token: what the proposer waits for a token; in_llama_decode: the part spent inside
    # llama_decode (the model's layers and LM head), the rest being logits copy, widening, Python.
    out = {"ms_per_token": {s: statistics.median(t) * 1000 for s, t in times.items()},
           "in_llama_decode_ms": {s: statistics.median(t) * 1000 for s, t in decode.items()}}
    # Coverage on text outside the corpus the lists are counted from (this file's own docstring
    # and a paragraph of prose), as a rough check only; the bench's acceptance is the real one.
    held_out = tokenizer(__doc__ + " The committee postponed its decision until the auditors had reviewed "
                         "every contract signed since March.")["input_ids"]
    out["coverage"] = {s: shortlist.coverage(r.ids.numpy(), held_out) for s, r in runners.items()
                       if isinstance(r, shortlist.Shortlisted)}
    for spec in specs:
        print(f"{spec}: {out['ms_per_token'][spec]:.2f} ms a draft token, {out['in_llama_decode_ms'][spec]:.2f} in "
              "llama_decode", flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(SPECS))
