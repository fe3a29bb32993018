"""How close each CPU dtype's target is to the float32 model: over one text scored teacher-forced
(a Spec-Bench prompt and a Python file, ~400 tokens), the share of positions whose top token equals
float32's, and the mean KL(float32 || dtype) of the next-token distributions.

    python scripts/dtype_agreement.py OUT.json [DTYPE ...]      (default: bf16 w8a8 int8)
"""

import gc
import inspect
import json
import sys

import torch

from specdecode.proposers import suffix_index
from specdecode.models.backends.hf import load_model
from specdecode.models.registry import resolve


def text_ids(tokenizer) -> list[int]:
    prose = ("Explain, for a new engineer, why a hash map has constant expected lookup time, what happens "
             "when two keys collide, and when a sorted tree is the better choice.\n\n")
    return tokenizer(prose + inspect.getsource(suffix_index))["input_ids"][:400]


@torch.no_grad()
def logprobs(dtype: str, path: str) -> tuple[torch.Tensor, list[int]]:
    model, tokenizer = load_model(path, dtype)
    ids = text_ids(tokenizer)
    out = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    del model
    gc.collect()
    return out, ids


def main(out_path: str, dtypes: list[str]) -> None:
    path = str(resolve("default", "target").path)
    ref, ids = logprobs("float32", path)
    result = {"tokens": len(ids)}
    for dtype in dtypes:
        lp, _ = logprobs(dtype, path)
        agree = (lp.argmax(-1) == ref.argmax(-1)).float().mean().item()
        kl = (ref.exp() * (ref - lp)).sum(-1).mean().item()
        result[dtype] = {"top1_agreement": round(agree, 4), "mean_kl": round(kl, 5)}
        print(dtype, result[dtype], flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["bf16", "w8a8", "int8"])
