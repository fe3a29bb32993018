"""ONNX Runtime (MatMulNBits int4, accuracy level 4) against llama.cpp Q4_0 on the default target:
one pass of w tokens after 200 tokens of context, full model with attention, in alternating rounds.

The ONNX model is exported offline from the converted checkpoint with onnxruntime-genai's model
builder (see README.md here). Usage: python ort_curve.py ONNX_DIR [ROUNDS] > ort_curve.json
"""

import json
import sys
import time

import numpy as np
import onnxruntime as ort

from specdecode.bench.curves import text_ids
from specdecode.models.backends.dtype_choice import cpu_description
from specdecode.models.loader import as_runner, load
from specdecode.models.timing import pass_curve

WIDTHS = (1, 2, 3, 4, 5, 6, 8)
CONTEXT = 200


class OrtRow:
    """One row over an onnxruntime-genai export: past keys and values kept as arrays, a pass appends
    w tokens (logits for all of them), a rollback slices the last ones off."""

    def __init__(self, onnx_dir: str, threads: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Its worker threads would otherwise spin after a pass, on the cores the next runtime uses.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(f"{onnx_dir}/model.onnx", options, providers=["CPUExecutionProvider"])
        self.past = {i.name: i for i in self.session.get_inputs() if i.name.startswith("past_key_values")}
        heads, head_dim = kv_shape(onnx_dir)
        self.kv = {name: np.zeros((1, heads, 0, head_dim), dtype=np.float32) for name in self.past}
        self.length = 0

    def add_rows(self, ids):
        self.forward([ids])

    def forward(self, feeds, last_only=False):
        ids = np.asarray([feeds[0]], dtype=np.int64)
        mask = np.ones((1, self.length + ids.shape[1]), dtype=np.int64)
        out = self.session.run(None, {"input_ids": ids, "attention_mask": mask, **self.kv})
        names = [o.name for o in self.session.get_outputs()]
        for name, value in zip(names, out):
            if name.startswith("present"):
                self.kv[name.replace("present", "past_key_values")] = value
        self.length += ids.shape[1]
        return [out[0][0]]

    def rollback(self, drop):
        self.length -= drop[0]
        for name, value in self.kv.items():
            self.kv[name] = np.ascontiguousarray(value[:, :, : self.length])


def kv_shape(onnx_dir: str) -> tuple[int, int]:
    config = json.load(open(f"{onnx_dir}/genai_config.json"))["model"]["decoder"]
    return config["num_key_value_heads"], config["head_size"]


def main():
    onnx_dir = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    target, tokenizer = load("llamacpp:default@q4_0", "target", "auto", max_rows=1)
    runners = {"llamacpp q4_0": as_runner(target), "onnxruntime int4": OrtRow(onnx_dir, threads=2)}
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
    print(json.dumps({"machine": cpu_description(), "context": CONTEXT, "rounds": rounds, "prefill_tokens_per_s": prefill,
                      "argmax_agree_of_8": agree,
                      "pass_ms": {name: {w: round(times[(name, w)] * 1000, 1) for w in WIDTHS} for name in runners}},
                     indent=1))


if __name__ == "__main__":
    main()
