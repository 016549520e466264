"""shap_e/models/transmitter/params_proj.py: latent -> renderer weights."""
import math

import pytest
import torch

from shap_e.models.transmitter.params_proj import (
    ChannelsParamsProj,
    ChannelsProj,
    LinearParamsProj,
    MLPParamsProj,
    flatten_param_shapes,
    params_proj_from_config,
)
from shap_e.util.collections import AttrDict

SHAPES = {"a.weight": (4, 3), "b.weight": (2, 2, 5)}


def test_flatten_param_shapes_makes_leading_dimensions_rows():
    assert list(flatten_param_shapes(SHAPES).items()) == [("a.weight", (4, 3)), ("b.weight", (4, 5))]


def test_channels_proj_gives_each_token_its_own_projection_then_layernorm_and_bias():
    torch.manual_seed(0)
    proj = ChannelsProj(vectors=3, channels=4, d_latent=5, use_ln=True, learned_scale=0.5)
    torch.nn.init.normal_(proj.proj.bias)
    assert torch.equal(proj.norm.weight, torch.full((4,), 0.5))
    x = torch.randn(2, 3, 5)
    weight = proj.proj.weight.view(3, 4, 5)
    h = torch.stack([x[:, v] @ weight[v].T for v in range(3)], dim=1)
    expected = proj.norm(h) + proj.proj.bias.view(3, 4)
    torch.testing.assert_close(proj(x), expected, atol=1e-6, rtol=0)


def test_channels_proj_without_layernorm_scales_by_a_learned_gain_or_not_at_all():
    torch.manual_seed(0)
    gained = ChannelsProj(vectors=2, channels=3, d_latent=4, learned_scale=2.0)
    plain = ChannelsProj(vectors=2, channels=3, d_latent=4)
    assert not hasattr(gained, "norm") and torch.equal(gained.gain, torch.full((3,), 2.0))
    x = torch.randn(1, 2, 4)
    plain.proj.load_state_dict(gained.proj.state_dict())
    torch.testing.assert_close(gained(x), plain(x) * 2.0)
    wide = ChannelsProj(vectors=64, channels=64, d_latent=64)  # std init_scale / sqrt(d_latent * channels)
    assert abs(wide.proj.weight.std().item() - 1 / 64) < 0.001


def test_channels_params_proj_reads_consecutive_tokens_per_parameter_flat_or_not():
    torch.manual_seed(0)
    proj = ChannelsParamsProj(param_shapes=SHAPES, d_latent=5, use_ln=True)
    assert proj.latent_ctx == 8 and (proj.learned_scale, ChannelsParamsProj(param_shapes=SHAPES, d_latent=5).use_ln) == (None, False)
    x = torch.randn(2, 8, 5)
    out = proj(x)
    assert isinstance(out, AttrDict) and out["b.weight"].shape == (2, 2, 2, 5)
    torch.testing.assert_close(out["a.weight"], proj.projections["a__weight"](x[:, :4]))
    torch.testing.assert_close(out["b.weight"].view(2, 4, 5), proj.projections["b__weight"](x[:, 4:]))
    torch.testing.assert_close(proj(x.flatten(1))["b.weight"], out["b.weight"])
    with pytest.raises(ValueError, match=r"\[batch, 40\] or \[batch, 8, 5\]"):
        proj(torch.zeros(2, 7, 5))


def test_linear_and_mlp_projections_map_one_vector_to_every_parameter():
    torch.manual_seed(0)
    linear = LinearParamsProj(param_shapes=SHAPES, d_latent=256, init_scale=2.0)
    assert abs(linear.projections["a__weight"].weight.std().item() - 2.0 / math.sqrt(256)) < 0.02
    x = torch.randn(3, 256)
    out = linear(x)
    torch.testing.assert_close(out["b.weight"], linear.projections["b__weight"](x).view(3, 2, 2, 5))
    mlp = MLPParamsProj(param_shapes=SHAPES, d_latent=6)
    assert mlp.projections["a__weight"][0].out_features == 6  # hidden_size defaults to d_latent
    assert mlp(torch.randn(3, 6))["a.weight"].shape == (3, 4, 3)
    with pytest.raises(ValueError, match=r"\[batch, 6\]"):
        mlp(torch.randn(3, 7))


def test_params_proj_from_config_builds_by_name_without_changing_the_config():
    config = {"name": "channels", "init_scale": 1.0, "learned_scale": 0.0625, "use_ln": True}
    proj = params_proj_from_config(config, device=None, param_shapes=SHAPES, d_latent=5)
    assert isinstance(proj, ChannelsParamsProj) and proj.use_ln and config["name"] == "channels"
    assert isinstance(params_proj_from_config({"name": "mlp", "hidden_size": 3}, None, SHAPES, 5), MLPParamsProj)
    with pytest.raises(ValueError, match=r"unknown params_proj name 'conv'; valid names: \['channels', 'linear', 'mlp'\]"):
        params_proj_from_config({"name": "conv"}, None, SHAPES, 5)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['use_ln'\]"):
        params_proj_from_config({"name": "linear", "use_ln": True}, None, SHAPES, 5)
