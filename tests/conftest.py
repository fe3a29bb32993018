import os
import sys
from pathlib import Path

import pytest

# Under pytest-xdist (`make test` runs one worker a core) each worker computes on one thread: torch's,
# llama.cpp's and those of the servers and commands it starts, which inherit the environment. Workers
# of a core's threads each would take turns on the cores instead of sharing them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["SPECDECODE_LLAMACPP_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)

sys.path.insert(0, str(Path(__file__).parent))

import tiny  # noqa: E402

from specdecode import SpeculativeGenerator  # noqa: E402


@pytest.fixture(scope="session")
def tok():
    return tiny.tokenizer()


@pytest.fixture(scope="session")
def target_model():
    return tiny.model(hidden=64, layers=2, seed=0)


@pytest.fixture(scope="session")
def twin_gen(target_model, tok):
    """Draft = an exact copy of the target: every draft should be accepted."""
    return SpeculativeGenerator.from_models(target_model, tok, "draft", tiny.model(hidden=64, layers=2, seed=0), tok)


@pytest.fixture(scope="session")
def small_draft_gen(target_model, tok):
    """Draft = a smaller, differently initialised model: mostly rejected."""
    return SpeculativeGenerator.from_models(target_model, tok, "draft", tiny.model(hidden=32, layers=1, seed=1), tok)


@pytest.fixture(scope="session")
def near_draft_gen(target_model, tok):
    """A draft close to the target (its LM head perturbed): overlapping supports, frequent but not
    constant rejections, the case where the residual matters."""
    import copy

    import torch

    draft = copy.deepcopy(target_model)
    with torch.no_grad():
        torch.manual_seed(7)
        head = draft.lm_head.weight
        head.add_(torch.randn_like(head) * head.std())
    return SpeculativeGenerator.from_models(target_model, tok, "draft", draft, tok)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, tok):
    """Target, draft and a draft with another vocabulary, saved as checkpoints on disk."""
    root = tmp_path_factory.mktemp("tiny-models")
    paths = {}
    for name, model in (("target", tiny.model()), ("draft", tiny.model(hidden=32, layers=1, seed=1)),
                        ("bigvocab", tiny.model(hidden=32, layers=1, vocab=tiny.VOCAB + 10))):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths[name] = str(root / name)
    return paths
