"""Full-size models built from the shipped configs have exactly the official state-dict layout."""
import hashlib
from pathlib import Path

import pytest

from shap_e.models.configs import model_from_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "shap_e" / "configs"
KEYS_DIR = Path(__file__).resolve().parent / "keys"

OFFICIAL_SHA256 = {
    "transmitter_config.yaml": "ffe1bcb405104a37d9408391182ab118a4ef313c391e07689684f1f62071605e",
    "text_cond_config.yaml": "f290beeea3d3e9ff15db01bde5382b6e549e463060c0744f89c049505be246c1",
    "image_cond_config.yaml": "4e0745605a533c543c72add803a78d233e2a6401e0abfa0cad58afb4d74ad0b0",
    "diffusion_config.yaml": "efcb2cd7ee545b2d27223979d41857802448143990572a42645cd09c2942ed57",
}


def read_key_listing(name):
    rows = []
    for line in (KEYS_DIR / f"{name}.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, shape, _dtype = line.split("\t")
        rows.append((key, tuple(int(s) for s in shape.strip("[]").split(", ") if s)))
    return rows


@pytest.mark.parametrize("filename", sorted(OFFICIAL_SHA256))
def test_shipped_config_matches_official_sha256(filename):
    digest = hashlib.sha256((CONFIG_DIR / filename).read_bytes()).hexdigest()
    assert digest == OFFICIAL_SHA256[filename]


@pytest.mark.parametrize(
    "name, config",
    [
        ("transmitter", "transmitter_config.yaml"),
        ("decoder", "vector_decoder_config.yaml"),
        ("text300M", "text_cond_config.yaml"),
        ("image300M", "image_cond_config.yaml"),
    ],
)
def test_full_size_state_dict_layout_equals_official_listing(name, config):
    model = model_from_config(CONFIG_DIR / config, device="meta")
    ours = [(key, tuple(value.shape)) for key, value in model.state_dict().items()]
    assert ours == read_key_listing(name)


def test_unknown_model_name_lists_valid_names():
    with pytest.raises(ValueError, match="valid names: .*SplitVectorDiffusion"):
        model_from_config({"name": "NoSuchModel"})


def test_unknown_config_key_lists_valid_keys():
    config = {"name": "SplitVectorDiffusion", "d_latent": 16, "latent_ctx": 4, "wdith": 3, "inner": {}}
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['wdith'\]"):
        model_from_config(config)


def test_bad_device_string_is_rephrased():
    with pytest.raises(ValueError, match="device='cdua' is not a valid device"):
        model_from_config(CONFIG_DIR / "diffusion_config.yaml", device="cdua")


def test_missing_config_file_is_named():
    with pytest.raises(ValueError, match="is not a file"):
        model_from_config("no/such/config.yaml")


def test_skip_weight_init_leaves_init_functions_restored_and_skips_randomness():
    import torch

    from shap_e.util.config import skip_weight_init

    normal = torch.nn.init.normal_
    with skip_weight_init():
        torch.manual_seed(0)
        a = torch.nn.Linear(4, 4)
        state = torch.random.get_rng_state()
    assert torch.nn.init.normal_ is normal
    torch.manual_seed(0)
    torch.nn.Linear(4, 4)
    assert not torch.equal(state, torch.random.get_rng_state())  # a normal build consumes the RNG
    assert a.weight.shape == (4, 4)


def test_settings_of_builds_the_dataclass_from_a_mapping_and_names_the_key_when_it_cannot():
    from dataclasses import dataclass

    from shap_e.util.config import settings_of

    @dataclass
    class Fit:
        steps: int = 3
        lr: float = 0.5

    assert settings_of({}, "fit", Fit) == Fit() == settings_of({"fit": None}, "fit", Fit)
    assert settings_of({"fit": {"steps": 7}}, "fit", Fit) == Fit(steps=7, lr=0.5)
    with pytest.raises(ValueError, match=r"fit must be a mapping of settings \(\{\} for the defaults\), got \[1\]"):
        settings_of({"fit": [1]}, "fit", Fit)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['step'\] in the fit config; valid keys: \['lr', 'steps'\]"):
        settings_of({"fit": {"step": 7}}, "fit", Fit)
