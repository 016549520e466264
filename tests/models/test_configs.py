"""Models built from configs: the shipped full-size configs have exactly the official state-dict layout,
and every official model name builds its class."""
import hashlib
from pathlib import Path

import pytest
import torch

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


SHAPES_RENDERER = "f"  # golden f's transmitter renderer: 4 meta layers of a 16-wide NeRSTF MLP
TINY_TRUNK = {"width": 16, "layers": 1, "heads": 2}
TINY_CONFIGS = {
    "PointDiffusionTransformer": {"input_channels": 3, "output_channels": 6, "n_ctx": 5, **TINY_TRUNK},
    "CLIPImagePointDiffusionTransformer": {"input_channels": 3, "output_channels": 6, "n_ctx": 5, **TINY_TRUNK},
    "CLIPImageGridPointDiffusionTransformer": {"input_channels": 3, "output_channels": 6, "n_ctx": 5, **TINY_TRUNK},
    "UpsamplePointDiffusionTransformer": {"input_channels": 3, "output_channels": 6, "n_ctx": 5, "cond_ctx": 4,
                                          **TINY_TRUNK},
    "CLIPImageGridUpsamplePointDiffusionTransformer": {"input_channels": 3, "output_channels": 6, "n_ctx": 5,
                                                       "cond_ctx": 4, **TINY_TRUNK},
    "PointDiffusionPerceiver": {"n_ctx": 5, "n_latent": 2, "width": 16, "encoder_layers": 1, "latent_layers": 1,
                                "decoder_layers": 1, "heads": 2},
    "PooledMLP": {"hidden_size": 8, "resblocks": 1},
    "SplitVectorDiffusion": {"d_latent": 16, "latent_ctx": 4,
                             "inner": {"name": "PointDiffusionTransformer", **TINY_TRUNK}},
}
ENCODERS = {
    "PointCloudPerceiverChannelsEncoder": {"width": 16, "layers": 2, "heads": 2, "d_latent": 8, "data_ctx": 4,
                                           "inner_batch_size": 8, "fps_method": "first"},
    "PointCloudTransformerChannelsEncoder": {"width": 16, "layers": 1, "heads": 2, "d_latent": 8},
    "PointCloudPerceiverEncoder": {"width": 16, "layers": 2, "heads": 2, "d_latent": 8, "latent_ctx": 2,
                                   "data_ctx": 4, "inner_batch_size": 8, "fps_method": "first"},
    "PointCloudTransformerEncoder": {"width": 16, "layers": 1, "heads": 2, "d_latent": 8, "latent_ctx": 2},
    "MultiviewTransformerEncoder": {"width": 16, "layers": 1, "heads": 2, "d_latent": 8, "latent_ctx": 2,
                                    "num_views": 2, "image_size": 16, "patch_size": 8},
}


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_every_generation_model_name_builds_its_official_class(name):
    model = model_from_config({"name": name, **TINY_CONFIGS[name]})
    assert type(model).__name__ == name


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_every_encoder_name_builds_inside_a_transmitter(golden, name):
    renderer = golden(SHAPES_RENDERER)["config"]["transmitter"]["renderer"]
    params_proj = {"name": "channels"} if "Channels" in name else {"name": "linear"}
    encoder = {"name": name, "params_proj": params_proj, **ENCODERS[name]}
    model = model_from_config({"name": "Transmitter", "encoder": encoder, "renderer": renderer})
    assert type(model.encoder).__name__ == name
    assert set(model.encoder.param_shapes) == {f"nerstf.mlp.{i}.weight" for i in range(4)}


def test_the_split_vector_diffusion_key_latent_ctx_is_the_token_count_n_ctx():
    model = model_from_config({"name": "SplitVectorDiffusion", **TINY_CONFIGS["SplitVectorDiffusion"]})
    assert model.n_ctx == 4 and model.wrapped.n_ctx == 4 and model.wrapped.input_channels == 4
    out = model(torch.randn(2, 16), torch.tensor([1, 2]))
    assert out.shape == (2, 32)


def test_released_bottleneck_and_projection_options_come_from_the_config():
    model = model_from_config(CONFIG_DIR / "transmitter_config.yaml", device="meta")
    assert model.encoder.latent_bottleneck.diffusion_prob == 0.1
    proj = model.encoder.params_proj
    assert proj.use_ln and proj.learned_scale == 0.0625


def test_bad_constructor_keys_are_named_for_every_class():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['widht'\] in the PointDiffusionTransformer config"):
        model_from_config({"name": "PointDiffusionTransformer", "widht": 3})
    with pytest.raises(ValueError, match="SplitVectorDiffusion needs an `inner:` model config"):
        model_from_config({"name": "SplitVectorDiffusion", "d_latent": 4, "latent_ctx": 2})
