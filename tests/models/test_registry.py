"""The model registry: official names, shipped configs against official hashes, extensibility."""
import pytest

from shap_e.models import registry
from shap_e.models.download import hash_file
from shap_e.models.registry import MODELS, ModelSpec, config_path, get_spec, register_model

OFFICIAL = ("transmitter", "decoder", "text300M", "image300M", "diffusion")


def test_official_names_are_registered_with_release_urls():
    assert set(OFFICIAL) <= set(MODELS)
    assert get_spec("text300M").url == "https://openaipublic.azureedge.net/main/shap-e/text_cond.pt"
    assert get_spec("decoder").url.endswith("/vector_decoder.pt")
    assert not get_spec("diffusion").has_weights
    assert all(get_spec(n).has_weights for n in OFFICIAL if n != "diffusion")


def test_every_registered_config_file_ships_with_the_package():
    for spec in MODELS.values():
        assert config_path(spec).is_file(), spec.name


@pytest.mark.parametrize("name", ["transmitter", "text300M", "image300M", "diffusion"])
def test_shipped_config_matches_official_sha256(name):
    spec = get_spec(name)
    assert not spec.config_reconstructed
    assert hash_file(config_path(spec)) == spec.config_sha256


def test_decoder_config_is_flagged_as_an_unverified_reconstruction():
    spec = get_spec("decoder")
    assert spec.config_reconstructed
    assert hash_file(config_path(spec)) != spec.config_sha256


def test_parameter_counts_match_the_spec_key_listings():
    assert get_spec("text300M").n_params == 315_692_032
    assert get_spec("image300M").n_params == 315_956_224


def test_unknown_name_error_lists_valid_names():
    with pytest.raises(ValueError) as info:
        get_spec("text300")
    assert all(name in str(info.value) for name in OFFICIAL)


def test_register_model_adds_and_refuses_silent_overwrite(monkeypatch):
    monkeypatch.setattr(registry, "MODELS", dict(MODELS))
    spec = ModelSpec("mini", "text_cond_config.yaml", url="file:///x.pt", sha256="ab" * 32)
    register_model(spec)
    assert registry.get_spec("mini") is spec
    with pytest.raises(ValueError, match="already registered"):
        register_model(spec)
    replacement = ModelSpec("mini", "diffusion_config.yaml")
    assert register_model(replacement, overwrite=True) is registry.get_spec("mini")


def test_model_spec_validates_hashes():
    with pytest.raises(ValueError, match="64 hex digits"):
        ModelSpec("m", "c.yaml", url="https://x/m.pt", sha256=None)
    with pytest.raises(ValueError, match="config_sha256"):
        ModelSpec("m", "c.yaml", config_sha256="XYZ")


def test_model_spec_validates_the_init_strength():
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="init_strength"):
            registry.ModelSpec("x", "x.yaml", init_strength=bad)
    assert registry.ModelSpec("x", "x.yaml", init_strength=0.3).init_strength == 0.3


def test_model_spec_validates_the_guidance_max_sigma():
    for bad in (0.0, -1.0, "5", True):
        with pytest.raises(ValueError, match="guidance_max_sigma"):
            registry.ModelSpec("x", "x.yaml", guidance_max_sigma=bad)
    assert registry.ModelSpec("x", "x.yaml", guidance_max_sigma=5).guidance_max_sigma == 5
    assert registry.get_spec("text-small").guidance_max_sigma == 2.5


def test_models_can_be_registered_from_a_yaml_file(tmp_path, monkeypatch):
    import yaml

    from shap_e.models import registry
    from shap_e.models.download import available_model

    monkeypatch.setattr(registry, "MODELS", dict(registry.MODELS))
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"my-prior": {
        "config_file": "text_cond_config.yaml", "url": "file:///nowhere/w.pt", "sha256": "0" * 64,
        "decoders": ["transmitter"], "description": "a fine-tune",
    }}))
    registry.register_from_file(path)
    spec = registry.get_spec("my-prior")
    assert spec.decoders == ("transmitter",) and spec.url == "file:///nowhere/w.pt"
    # The official text300M is not cached here, so the registered fallback is chosen, offline.
    assert available_model("text300M", "my-prior", cache_dir=tmp_path) == "my-prior"
    assert available_model("text300M", "not-registered", cache_dir=tmp_path) == "text300M"
    path.write_text(yaml.safe_dump({"bad": {"config_file": "x.yaml", "colour": "red"}}))
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        registry.register_from_file(path)
