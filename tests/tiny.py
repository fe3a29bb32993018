"""Tiny randomly initialised transformers models and a byte-level tokenizer, built from configs here."""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 256 + len(SPECIALS)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@functools.lru_cache(maxsize=None)
def tokenizer() -> PreTrainedTokenizerFast:
    byte_vocab = {ch: i for i, ch in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    byte_vocab = {ch: i for i, ch in enumerate(sorted(byte_vocab))}
    tok = Tokenizer(models.BPE(vocab=byte_vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIALS})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model(hidden: int = 64, layers: int = 2, seed: int = 0, vocab: int = VOCAB, max_positions: int = 512,
          dtype: torch.dtype = torch.float32) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        eos_token_id=tokenizer().convert_tokens_to_ids("<|im_end|>"),
    )
    m = Qwen2ForCausalLM(config).to(dtype)
    # Larger logits than the default init so greedy continuations are not near-ties everywhere.
    with torch.no_grad():
        m.lm_head.weight.mul_(8.0)
    return m.eval()


@torch.no_grad()
def reference_logits(m, tokens: list[int], n: int) -> torch.Tensor:
    """The last n positions' logits of one uncached forward over the whole sequence."""
    return m(input_ids=torch.tensor([tokens])).logits[0, -n:].float()
