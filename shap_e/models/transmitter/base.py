"""`Transmitter` (encoder + renderer) and `ChannelsDecoder` (params projection + renderer).

Both turn a latent into NeRSTF MLP weights with `bottleneck_to_params` and carry the renderer
that evaluates them (`.renderer`), which is all the decoding helpers need.
"""
from collections import OrderedDict
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from shap_e.util.config import check_keys
from shap_e.models.nerstf.mlp import position_features
from shap_e.models.transmitter.channels_encoder import PointCloudPerceiverChannelsEncoder
from shap_e.models.transmitter.params_proj import ChannelsParamsProj, ParamShapes

ENCODER_KEYS = {
    "name", "cross_attention_dataset", "d_latent", "data_ctx", "fps_method", "heads", "init_scale",
    "inner_batch_size", "input_channels", "latent_bottleneck", "layers", "max_depth", "max_unrolls",
    "min_unrolls", "params_proj", "image_size", "patch_size", "pointconv_hidden", "pointconv_padding_mode",
    "pointconv_patch_size", "pointconv_samples", "pointconv_stride", "pos_emb", "use_depth",
    "use_pointconv", "width", "xattn_layers",
}
# Options the release fixes; other values would need code paths this package does not have.
FIXED_ENCODER_OPTIONS = {
    "name": "PointCloudPerceiverChannelsEncoder",
    "fps_method": "first",
    "pos_emb": "nerf",
    "use_depth": True,
    "max_unrolls": 1,
    "min_unrolls": 1,
}


def meta_param_shapes(renderer_config: Dict[str, Any]) -> ParamShapes:
    """Shapes of the latent-generated NeRSTF weights: `nerstf.mlp.i.weight` for the meta layers."""
    nerstf = renderer_config["nerstf"]
    hidden, n_meta = nerstf["d_hidden"], nerstf["n_meta_layers"]
    if nerstf.get("insert_direction_at", 4) < n_meta or nerstf.get("meta_bias", False):
        raise ValueError(
            "only NeRSTF configs whose meta layers precede the direction input, without meta bias, are supported"
        )
    width = position_features(nerstf.get("position_degrees", 15))
    return OrderedDict((f"nerstf.mlp.{i}.weight", (hidden, width if i == 0 else hidden)) for i in range(n_meta))


class Transmitter(nn.Module):
    def __init__(self, encoder: PointCloudPerceiverChannelsEncoder, renderer: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.renderer = renderer

    def bottleneck_to_params(self, latent: torch.Tensor) -> Dict[str, torch.Tensor]:
        """`[batch, latent_ctx * d_latent]` -> `{name: [batch, rows, cols]}` NeRSTF weights."""
        return self.encoder.bottleneck_to_params(latent)

    def encode_to_bottleneck(self, batch, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return self.encoder.encode_to_bottleneck(batch, generator)

    def forward(self, batch, generator: Optional[torch.Generator] = None) -> Dict[str, torch.Tensor]:
        """Asset batch -> NeRSTF weights `{name: [batch, rows, cols]}` (what training differentiates)."""
        return self.encoder(batch, generator)


class ChannelsDecoder(nn.Module):
    def __init__(self, params_proj: ChannelsParamsProj, renderer: nn.Module):
        super().__init__()
        self.params_proj = params_proj
        self.renderer = renderer

    @property
    def latent_ctx(self) -> int:
        return self.params_proj.latent_ctx

    def bottleneck_to_params(self, latent: torch.Tensor) -> Dict[str, torch.Tensor]:
        """`[batch, latent_ctx * d_latent]` -> `{name: [batch, rows, cols]}` NeRSTF weights."""
        return self.params_proj(latent)


def _params_proj_kwargs(config: Dict[str, Any]) -> Dict[str, Any]:
    config = dict(config)
    name = config.pop("name", None)
    if name != "channels":
        raise ValueError(f"unknown params_proj name {name!r}; valid names: ['channels']")
    check_keys(config, {"init_scale", "learned_scale", "use_ln"}, "params_proj")
    return config


def build_transmitter(config: Dict[str, Any], device=None) -> Transmitter:
    from shap_e.models.nerstf.renderer import build_renderer

    check_keys(config, {"name", "encoder", "renderer"}, "Transmitter")
    enc = dict(config["encoder"])
    check_keys(enc, ENCODER_KEYS, "Transmitter encoder")
    for key, value in FIXED_ENCODER_OPTIONS.items():
        if enc.pop(key, value) != value:
            raise ValueError(f"encoder {key}={config['encoder'][key]!r} is not supported; only {value!r}")
    enc["params_proj"] = _params_proj_kwargs(enc["params_proj"])
    param_shapes = meta_param_shapes(config["renderer"])
    encoder = PointCloudPerceiverChannelsEncoder(param_shapes=param_shapes, device=device, **enc)
    return Transmitter(encoder, build_renderer(config["renderer"], device=device))


def build_channels_decoder(config: Dict[str, Any], device=None) -> ChannelsDecoder:
    from shap_e.models.nerstf.renderer import build_renderer

    check_keys(config, {"name", "d_latent", "latent_ctx", "params_proj", "renderer"}, "ChannelsDecoder")
    param_shapes = meta_param_shapes(config["renderer"])
    params_proj = ChannelsParamsProj(
        param_shapes=param_shapes, d_latent=config["d_latent"], device=device,
        **_params_proj_kwargs(config["params_proj"]),
    )
    if params_proj.latent_ctx != config["latent_ctx"]:
        raise ValueError(
            f"latent_ctx={config['latent_ctx']} does not match the renderer's meta weights "
            f"({params_proj.latent_ctx} rows)"
        )
    return ChannelsDecoder(params_proj, build_renderer(config["renderer"], device=device))
