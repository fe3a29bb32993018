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


def char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """A character-level tokenizer of len(SPECIALS) + len(alphabet) tokens (unknown characters map to
    the first special), the kind people build to test a pipeline; no byte fallback, so the
    vocabulary can be smaller than 256."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    vocab.update({ch: len(SPECIALS) + i for i, ch in enumerate(alphabet)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=SPECIALS[0]))
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=SPECIALS[0])
    fast.add_special_tokens({"additional_special_tokens": SPECIALS})
    fast.chat_template = CHAT_TEMPLATE
    return fast


LOWER = " abcdefghijklmnopqrstuvwxyz\n"  # 28 characters: a vocabulary of 31 with the specials
PRINTABLE = "".join(chr(c) for c in range(32, 127)) + "\n\t"  # 97: a vocabulary of 100


def small_vocab_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0, hidden: int = 32) -> Qwen2ForCausalLM:
    """A tiny model over a small character vocabulary (vocab_size = the tokenizer's length)."""
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return Qwen2ForCausalLM(config).eval()


def batch_equals_plain(gen, plain, params, k: int = 3) -> None:
    """Three requests (two alike) submitted together to `gen` emit what `plain` emits for each alone."""
    from specdecode.engine.request import Request

    batch = [Request(list(ids), params, k=k) for ids in ([5, 6, 7], [9, 9, 9, 9], [5, 6, 7])]
    for req in batch:
        gen.submit(req)
    gen.run_until_idle()
    for req in batch:
        assert req.generated == plain.generate(req.prompt_ids, params, k=0, chat=False).token_ids
