"""Weights that ship inside the package (`ModelSpec.weights_file`): loaded offline, hash-checked."""
import hashlib

import pytest
import torch
import yaml
from safetensors.torch import save_file

from shap_e.models import registry
from shap_e.models.download import ChecksumError, load_model, weights_cached
from shap_e.util.errors import CorruptFileError
from shap_e.models.registry import ModelSpec


@pytest.fixture
def bundled(golden, tmp_path, monkeypatch):
    config = golden("a")["config"]["variant_A"]
    state = {k: v.contiguous() for k, v in golden("a")["state_dict"]["variant_A"].items()}
    weights = tmp_path / "tiny.safetensors"
    save_file(state, str(weights))
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(config))
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    spec = ModelSpec("tiny-bundled", str(config_file), sha256=digest, weights_file=str(weights))
    monkeypatch.setitem(registry.MODELS, "tiny-bundled", spec)
    return spec, state


def test_bundled_weights_load_without_any_cache_or_network(bundled, tmp_path):
    spec, state = bundled
    assert weights_cached("tiny-bundled", cache_dir=tmp_path / "empty-cache")
    model = load_model("tiny-bundled", cache_dir=tmp_path / "empty-cache")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert not (tmp_path / "empty-cache").exists()


def test_damaged_bundled_weights_fail_the_hash_check(bundled):
    spec, _ = bundled
    data = bytearray(spec.bundled_weights.read_bytes())
    data[-1] ^= 0xFF
    spec.bundled_weights.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="reinstall"):
        load_model("tiny-bundled")


def test_missing_bundled_weights_name_the_path(bundled):
    spec, _ = bundled
    spec.bundled_weights.unlink()
    assert not weights_cached("tiny-bundled")
    with pytest.raises(CorruptFileError, match="bundled weights of 'tiny-bundled' are missing"):
        load_model("tiny-bundled")


def test_a_spec_cannot_both_download_and_bundle():
    with pytest.raises(ValueError, match="not both"):
        ModelSpec("x", "c.yaml", url="https://example.com/w.pt", sha256="0" * 64, weights_file="w.safetensors")
    with pytest.raises(ValueError, match="64 hex digits"):
        ModelSpec("x", "c.yaml", weights_file="w.safetensors")


def test_relative_weights_files_resolve_inside_the_package():
    spec = ModelSpec("x", "c.yaml", sha256="0" * 64, weights_file="w.safetensors")
    assert spec.bundled_weights == registry.WEIGHTS_DIR / "w.safetensors"


def test_the_bundled_weights_fit_in_25_megabytes_together():
    from shap_e.models.registry import MODELS

    files = [spec.bundled_weights for spec in MODELS.values() if spec.weights_file]
    assert len(files) == 3 and all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in files) <= 25_000_000
