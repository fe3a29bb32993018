"""One-token step cost of the torch backends: dynamic cache (hf:), static cache (hf-static:) and the
compiled static step (hf-compile:), for the default draft and target after a 300-token context.

    python scripts/step_cost.py [DTYPE]      (default bfloat16; prints medians in ms and compile time)
"""

import sys

from specdecode.models.backends.hf_batch import BatchRunner
from specdecode.models.backends.hf_static import StaticRunner
from specdecode.models.backends.serial import SerialRunner
from specdecode.models.generator import load_models
from specdecode.advise.tune import time_step

CONTEXT = list(range(1000, 1300))


def step_ms(runner) -> float:
    return time_step(runner, CONTEXT, steps=17, warmup=3) * 1000  # the first steps warm caches (and compile)


def main(dtype: str = "bfloat16") -> None:
    target, _, draft, _ = load_models("default", "default", dtype)
    for name, model in (("draft", draft), ("target", target)):
        compiled = StaticRunner(model, compile=True)
        row = {"dynamic": step_ms(BatchRunner(model)), "static": step_ms(SerialRunner(StaticRunner(model))),
               "compiled": step_ms(SerialRunner(compiled))}
        print(name, " ".join(f"{k} {v:.1f} ms" for k, v in row.items()), f"(compiled in {compiled.compile_s:.0f} s)")


if __name__ == "__main__":
    main(*sys.argv[1:])
