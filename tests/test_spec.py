"""Model specs, parsed once: [BACKEND:]SOURCE[@QUANT][+vN] (models/spec.py)."""

import pytest

from specdecode.models.registry import ModelError
from specdecode.models.spec import ModelSpec, split_quant, split_shortlist


def test_a_spec_is_parsed_into_its_parts():
    s = ModelSpec.parse(" llamacpp:default@Q4_0+v32k ")
    assert (s.backend, s.source, s.quant, s.shortlist, s.text) == ("llamacpp", "default", "q4_0", 32768,
                                                                   "llamacpp:default@Q4_0+v32k")
    assert ModelSpec.parse("hf-static:/m/dir") == ModelSpec("hf-static:/m/dir", "hf-static", "/m/dir")
    # A quantisation is llama.cpp's: on other backends '@' is part of the source (a path may hold one).
    assert ModelSpec.parse("/m/a@b").source == "/m/a@b" and ModelSpec.parse("/m/a@b").quant is None
    assert ModelSpec.parse(s) is s  # parsed once, passed down as it is


def test_a_shortlist_is_for_drafts_only():
    spec = ModelSpec.parse("llamacpp:default@q4_0+v16k")
    assert spec.for_role("draft") is spec
    with pytest.raises(ModelError, match="a vocabulary shortlist is for drafts"):
        spec.for_role("target")


def test_unknown_quantisation_is_a_clear_error():
    with pytest.raises(ModelError, match="unknown llama.cpp quantisation 'q3_x'"):
        split_quant("default@q3_x")
    with pytest.raises(ModelError, match="unknown llama.cpp quantisation"):
        ModelSpec.parse("llamacpp:default@q3_x")
    assert split_quant("default") == ("default", None)
    assert split_quant("/m/model.gguf@Q4_0") == ("/m/model.gguf", "q4_0")


def test_names_and_sizes():
    assert split_shortlist("default@q4_0+v32k") == ("default@q4_0", 32768)
    assert split_shortlist("default+v4096") == ("default", 4096)
    assert split_shortlist("default") == ("default", None)
    for bad in ("+vx", "+v0"):
        with pytest.raises(ModelError, match="is a number of tokens"):
            split_shortlist("default" + bad)
