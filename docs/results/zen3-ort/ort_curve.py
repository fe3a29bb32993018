"""ONNX Runtime (MatMulNBits int4, accuracy level 4) against llama.cpp Q4_0 on the default target:
one pass of w tokens after 200 tokens of context, full model with attention, and a pass over 4 such
rows, through the runners the engine uses, in alternating rounds.

The ONNX model is exported offline from the converted checkpoint with onnxruntime-genai's model
builder (see README.md here). Usage: python ort_curve.py ONNX_DIR [ROUNDS] > ort_curve.json
"""

import json
import sys
import time

from pathlib import Path

import numpy as np

from specdecode.bench.curves import text_ids
from specdecode.models.backends.dtype_choice import cpu_description
from specdecode.models.backends.onnx import OrtModel, OrtRunner
from specdecode.models.loader import as_runner, load
from specdecode.models.timing import alternating_medians, pass_curve

WIDTHS = (1, 2, 3, 4, 5, 6, 8)
CONTEXT = 200
ROWS = 4


def main():
    onnx_dir = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    target, tokenizer = load("llamacpp:default@q4_0", "target", "auto", max_rows=ROWS)
    runners = {"llamacpp q4_0": as_runner(target), "onnxruntime int4": OrtRunner(OrtModel(Path(onnx_dir)))}
    ids = text_ids(tokenizer, CONTEXT + max(WIDTHS))
    prefill, agree = {}, None
    for name, runner in runners.items():
        start = time.perf_counter()
        runner.add_rows(ids[:CONTEXT])
        prefill[name] = round(CONTEXT / (time.perf_counter() - start), 1)
    # Do the two runtimes predict the same next tokens over the widest pass? (a sanity check of the
    # export, not an exactness claim: int4 and Q4_0 round the weights differently)
    logits = {name: np.asarray(r.forward([ids[CONTEXT:CONTEXT + 8]])[0]) for name, r in runners.items()}
    for name, r in runners.items():
        r.rollback([8])
    a, b = (np.argmax(x[-8:], axis=-1) for x in logits.values())
    agree = int((a == b).sum())
    times = pass_curve(runners, ids[CONTEXT:], WIDTHS, rounds)
    # ROWS rows at once (a server's batch): one token each, and a verify pass of 3 tokens each.
    for runner in runners.values():
        runner.add_rows(ids[:CONTEXT], count=ROWS - 1)
    tasks = {(name, w): (lambda r=runner, w=w: r.forward([ids[CONTEXT:CONTEXT + w]] * ROWS))
             for name, runner in runners.items() for w in (1, 3)}
    batched = alternating_medians(tasks, rounds, after=lambda key: runners[key[0]].rollback([key[1]] * ROWS))
    print(json.dumps({"machine": cpu_description(), "context": CONTEXT, "rounds": rounds, "prefill_tokens_per_s": prefill,
                      "argmax_agree_of_8": agree,
                      "pass_ms": {name: {w: round(times[(name, w)] * 1000, 1) for w in WIDTHS} for name in runners},
                      f"{ROWS}_rows_pass_ms": {name: {w: round(batched[(name, w)] * 1000, 1) for w in (1, 3)}
                                              for name in runners}},
                     indent=1))


if __name__ == "__main__":
    main()
