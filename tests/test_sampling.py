import pytest
import torch

from specdecode import InvalidParameter, SamplingParams, probs_from_logits


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("temperature", -0.1, "temperature must be a finite number >= 0"),
        ("temperature", float("nan"), "temperature must be a finite number >= 0"),
        ("top_p", 0.0, r"top_p must be in \(0, 1\]"),
        ("top_p", 1.5, r"top_p must be in \(0, 1\]"),
        ("max_new_tokens", 0, "max_new_tokens must be an integer >= 1"),
        ("top_k", -1, "top_k must be an integer >= 0"),
        ("min_p", 1.5, r"min_p must be in \[0, 1\]"),
        ("seed", -3, "seed must be a non-negative integer"),
        ("stop", [""], "stop strings must be non-empty"),
        ("stop_token_ids", ["a"], "stop_token_ids must be a list of int"),
    ],
)
def test_invalid_params_say_the_valid_range(field, value, message):
    with pytest.raises(InvalidParameter, match=message):
        SamplingParams(**{field: value})


def test_greedy_is_one_hot_argmax():
    probs = probs_from_logits(torch.tensor([[0.1, 3.0, -1.0]]), SamplingParams(temperature=0))
    assert probs.tolist() == [[0.0, 1.0, 0.0]]


def test_temperature_top_k_top_p_min_p():
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    p = probs_from_logits(logits, SamplingParams(temperature=1.0))
    assert torch.allclose(p, torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]), atol=1e-6)
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=2))
    assert torch.allclose(p, torch.tensor([0.5, 0.2, 0, 0, 0]) / 0.7, atol=1e-6)
    # top_p = 0.8: 0.5 + 0.2 = 0.7 < 0.8, so the third token is needed; the fourth is not.
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.8))
    assert torch.allclose(p, torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85, atol=1e-6)
    # min_p = 0.3: keep tokens with p >= 0.15.
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, min_p=0.3))
    assert torch.allclose(p, torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85, atol=1e-6)
    # temperature 2 flattens: p ~ sqrt(p0).
    p = probs_from_logits(logits, SamplingParams(temperature=2.0))
    expected = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]).sqrt()
    assert torch.allclose(p, expected / expected.sum(), atol=1e-6)


def test_a_top_p_below_float32s_range_keeps_the_top_token():
    """top_p = 5e-324 is valid (> 0) but rounds to 0 in float32: the most likely token is kept
    alone, never a distribution of NaNs. Control: a top_p that is 0 in float32 drops everything
    without the rule that the first token always stays."""
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3]))
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=5e-324))
    assert p.tolist() == [0.0, 1.0, 0.0]
    mass_before = torch.tensor([0.0, 0.6, 0.9])
    assert bool((mass_before >= 5e-324).all())  # what the rule guards against


def test_params_are_frozen_and_lists_become_tuples():
    params = SamplingParams(stop=["a", "b"], stop_token_ids=[3])
    assert params.stop == ("a", "b") and params.stop_token_ids == (3,)
    assert params.replace(temperature=1.0).temperature == 1.0


def test_point_masses_are_taken_without_a_draw():
    from specdecode.sampling import sample_from

    probs = torch.zeros(3, 151_936)
    probs[0, 7], probs[1, 151_935], probs[2, 0] = 1.0, 0.25, 3.0  # need not be normalised
    gen = torch.Generator().manual_seed(5)
    state = gen.get_state()
    assert sample_from(probs, gen).tolist() == [7, 151_935, 0]
    assert torch.equal(gen.get_state(), state)  # greedy decoding consumes no random numbers
    mixed = probs.clone()
    mixed[1, 3] = 0.25  # one row with two tokens: the race is run, and draws are consumed
    picked = sample_from(mixed, gen)
    assert picked[0] == 7 and picked[2] == 0 and picked[1] in (3, 151_935)
    assert not torch.equal(gen.get_state(), state)


def test_argmax_ids_is_torch_argmax_with_first_of_ties():
    from specdecode.sampling.params import argmax_ids

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 1000, generator=g)
    assert argmax_ids(x) == x.argmax(-1).tolist() and argmax_ids(x[2]) == [int(x[2].argmax())]
    ties = torch.zeros(2, 50)
    ties[:, [7, 30]] = 1.0
    assert argmax_ids(ties) == [7, 7]
    # Other dtypes go through torch, with the same answer.
    assert argmax_ids(x.to(torch.bfloat16)) == x.to(torch.bfloat16).argmax(-1).tolist()
