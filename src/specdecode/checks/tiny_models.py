"""Tiny randomly initialised models and a byte-level tokenizer, built from configs here: what the
checks run on where real weights cannot go (a lent device, a test). Exactness needs no real weights:
the rule must give the target's distribution for any target and draft."""

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
# Output-head scale: larger logits than the default init, so greedy continuations are not near-ties
# everywhere and sampled ones are not near-uniform.
HEAD_SCALE = 8.0


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
    with torch.no_grad():
        m.lm_head.weight.mul_(HEAD_SCALE)
    return m.eval()


def save_pair(root: str) -> dict[str, str]:
    """A tiny target and a smaller draft sharing the tokenizer, saved as checkpoints under root."""
    paths = {}
    for name, m in (("target", model()), ("draft", model(hidden=32, layers=1, seed=1))):
        m.save_pretrained(f"{root}/{name}")
        tokenizer().save_pretrained(f"{root}/{name}")
        paths[name] = f"{root}/{name}"
    return paths
