"""transformers backend: a causal LM with a DynamicCache that is cropped on rejection."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel
from transformers.utils import logging as hf_logging

DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}': use one of bfloat16 (bf16), float32 (fp32), float16 (fp16)") from None


def load_model(path: str, dtype: torch.dtype) -> tuple[PreTrainedModel, object]:
    # transformers' per-tensor progress bars and notices drown the CLI's own output.
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.eval()
    return model, tokenizer


class HFRunner:
    """ModelRunner over a transformers model, batch size 1.

    The KV cache is transformers' DynamicCache; rollback is `crop` with a negative count (the
    transformers 5 API), which slices views and copies nothing.
    """

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.device = next(model.parameters()).device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_context = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self.cache = DynamicCache(config=model.config)
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self._length = 0

    @torch.inference_mode()
    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward needs at least one token")
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=ids,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=0 if all_logits else 1,
        )
        self._length += len(tokens)
        return out.logits[0].float()

    def truncate(self, length: int) -> None:
        drop = self._length - length
        if drop < 0:
            raise ValueError(f"cannot truncate a cache of {self._length} tokens to {length}")
        if drop:
            self.cache.crop(-drop)
            self._length = length
