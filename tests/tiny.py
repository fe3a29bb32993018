"""Tiny randomly initialised transformers models and a byte-level tokenizer (the package's
`checks.tiny_models`), and helpers the tests share about them."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from specdecode.checks.tiny_models import CHAT_TEMPLATE, SPECIALS, VOCAB, model, tokenizer  # noqa: F401  (the tests' names)


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
