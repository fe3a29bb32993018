"""Handing a fleet to vLLM or SGLang: the launch command with speculative decoding configured as
`plan` (or `tune`) chose it, in each engine's own flag names."""

from __future__ import annotations

def vllm_command(target: str, draft: str | None, proposer: str, k: int, tp: int, ngram_max: int = 3,
                 ngram_min: int = 1) -> str:
    """`vllm serve` with --speculative-config (checked against vLLM 0.10/0.11's flag names)."""
    import json

    if proposer == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": ngram_max,
                "prompt_lookup_min": ngram_min}
    elif proposer == "suffix":
        # vLLM runs ArcticInference's suffix decoding (pip install arctic-inference beside vLLM);
        # factor and probability as ours (proposers/suffix.py).
        spec = {"method": "suffix", "num_speculative_tokens": k, "suffix_decoding_max_spec_factor": 1.0,
                "suffix_decoding_min_token_prob": 0.1}
    else:
        spec = {"method": "draft_model", "model": draft, "num_speculative_tokens": k,
                "draft_tensor_parallel_size": 1}
    return f"vllm serve {target} --tensor-parallel-size {tp} --speculative-config '{json.dumps(spec)}'"


def sglang_command(target: str, draft: str | None, proposer: str, k: int, tp: int) -> str:
    """`python -m sglang.launch_server` flags (checked against SGLang 0.4/0.5's flag names)."""
    if proposer in ("ngram", "suffix"):
        # SGLang has no suffix decoding; its NGRAM cache, which also keeps recent requests' tokens,
        # is the nearest.
        algo = f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {k + 1}"
    else:
        algo = (f"--speculative-algorithm STANDALONE --speculative-draft-model-path {draft} "
                f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}")
    return f"python -m sglang.launch_server --model-path {target} --tp {tp} {algo}"
