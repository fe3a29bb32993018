"""w8a8: int8 linears whose rows do not depend on each other, so a w8a8 target scores a token the
same in a one-token pass, a verify pass and any batch."""

import warnings

import torch

import tiny
from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.backends.hf import load_model
from specdecode.models.backends.w8a8 import W8A8Linear, quantise


def dynamic_int8(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def test_a_row_is_computed_alone_bit_for_bit():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96)
    q = W8A8Linear(lin)
    x = torch.randn(7, 64)
    x[3] *= 40  # an outlier row: it must not coarsen the others
    together = q(x)
    alone = torch.cat([q(x[i:i + 1]) for i in range(7)])
    assert torch.equal(together, alone)
    # ... and it approximates the float layer (int8 weights and activations: about 1% of the range).
    ref = lin(x)
    assert ((together - ref).abs().amax(dim=1) / ref.abs().amax(dim=1)).max() < 0.03
    # The control: one activation scale for the whole pass (fbgemm's dynamic int8) is not row-wise.
    dyn = dynamic_int8(torch.nn.Sequential(lin))
    assert not torch.equal(dyn(x), torch.cat([dyn(x[i:i + 1]) for i in range(7)]))


def test_quantise_replaces_every_linear_and_keeps_shapes():
    m = quantise(tiny.model(hidden=32, layers=1, seed=3))
    assert not any(type(mod) is torch.nn.Linear for mod in m.modules())
    assert m.get_output_embeddings().out_features == tiny.VOCAB
    with torch.no_grad():
        logits = m(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, tiny.VOCAB) and torch.isfinite(logits).all()


def cached_vs_uncached(m, prompt, block):
    """Logits of `block` scored in one cached verify pass, against the same positions of one
    uncached forward over everything (the same row, other widths)."""
    with torch.no_grad():
        out = m(input_ids=torch.tensor([prompt]), use_cache=True)
        verify = m(input_ids=torch.tensor([block]), past_key_values=out.past_key_values).logits[0]
    return verify, tiny.reference_logits(m, prompt + block, len(block))


def test_a_w8a8_targets_verify_pass_gives_the_one_token_logits_and_int8s_does_not():
    prompt, block = [5, 9, 77, 3, 140, 22], [60, 61, 200, 7, 8]
    a, b = cached_vs_uncached(quantise(tiny.model(seed=4)), prompt, block)
    assert (a - b).abs().max() < 1e-4
    a, b = cached_vs_uncached(dynamic_int8(tiny.model(seed=4)), prompt, block)
    assert (a - b).abs().max() > 1e-3  # the control: p moves with what is scored beside it


def test_speculation_over_a_w8a8_target_reproduces_its_plain_greedy_output(tok):
    target = quantise(tiny.model(seed=0))
    gen = SpeculativeGenerator.from_models(target, tok, "draft", tiny.model(hidden=32, layers=1, seed=1), tok)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for prompt in ("abcabcab", "hello there", "x"):
        plain = gen.generate(prompt, params, k=0, proposer="none", chat=False)
        for k, proposer in ((3, "draft"), (4, "ngram"), ("auto", "draft")):
            assert gen.generate(prompt, params, k=k, proposer=proposer, chat=False).token_ids == plain.token_ids


def test_load_model_w8a8_from_a_directory(tmp_path, tok):
    tiny.model(hidden=32, layers=1, seed=2).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, _ = load_model(str(tmp_path), "w8a8")
    assert isinstance(model.get_output_embeddings(), W8A8Linear)
