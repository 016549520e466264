"""Build any Shap-E model from its config (a dict or a YAML file), through one explicit table.

Configs are the constructor keyword arguments of the official release (`shap_e/configs/*.yaml`);
`model_from_config(config, device)` keeps the official import path and signature.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

import torch
import torch.nn as nn

from shap_e.util.config import ConfigLike, check_keys, read_config, resolve_device

def _split_vector_diffusion(config: Dict[str, Any], device) -> nn.Module:
    from shap_e.models.generation import (
        ImageGridConditionedTransformer,
        SplitVectorDiffusion,
        TextConditionedTransformer,
    )

    check_keys(
        config, {"name", "d_latent", "latent_ctx", "inner", "conditioner", "image_encoder", "latent_head", "text_layers",
                 "colour_hint", "category_hint"},
        "SplitVectorDiffusion",
    )
    inner = dict(config["inner"])
    inner_classes = {
        "CLIPImagePointDiffusionTransformer": TextConditionedTransformer,
        "CLIPImageGridPointDiffusionTransformer": ImageGridConditionedTransformer,
    }
    inner_name = inner.pop("name", None)
    if inner_name not in inner_classes:
        raise ValueError(f"unknown inner model name {inner_name!r}; valid names: {sorted(inner_classes)}")
    allowed = {
        "width", "layers", "heads", "init_scale", "time_token_cond", "use_pos_emb",
        "pos_emb_init_scale", "cond_drop_prob",
    }
    if inner_name == "CLIPImagePointDiffusionTransformer":
        allowed |= {"token_cond", "cond_width"}
    else:
        allowed |= {"grid_channels", "grid_tokens"}
    check_keys(inner, allowed, inner_name)
    d_latent, latent_ctx = config["d_latent"], config["latent_ctx"]
    if d_latent % latent_ctx:
        raise ValueError(f"d_latent={d_latent} must be a multiple of latent_ctx={latent_ctx}")
    channels = d_latent // latent_ctx
    wrapped = inner_classes[inner_name](
        input_channels=channels, output_channels=2 * channels, n_ctx=latent_ctx, device=device, **inner
    )
    image_encoder = _image_encoder(config.get("image_encoder"), device)
    return SplitVectorDiffusion(
        wrapped=wrapped, d_latent=d_latent, latent_ctx=latent_ctx, conditioner=config.get("conditioner", "clip"),
        image_encoder=image_encoder,
        latent_head=_latent_head(config.get("latent_head", False), image_encoder, d_latent, device),
        text_layers=_text_layers(config.get("text_layers")),
        colour_hint=_caption_hint("colour", config.get("colour_hint"), wrapped, device),
        category_hint=_caption_hint("category", config.get("category_hint"), wrapped, device),
    )


def _text_layers(layers: Any) -> Optional[List[int]]:
    """`text_layers:` of a MiniLM prior: None, or distinct hidden-state indices (their upper bound is
    checked when the encoder loads)."""
    from shap_e.models.sentence_encoder import check_layers

    if layers is None:
        return None
    try:
        return list(check_layers(layers))
    except ValueError as e:
        raise ValueError(f"text_layers: {e}; for example [0, 6]") from e


def _caption_hint(attribute: str, n_classes: Any, wrapped: nn.Module, device) -> Optional[nn.Module]:
    """The prior's `CaptionHint` read-out of `attribute` (`colour_hint: N` / `category_hint: N`, N
    classes), sized to its caption grid."""
    key = f"{attribute}_hint"
    if n_classes is None:
        return None
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 1:
        raise ValueError(f"{key} must be the number of {attribute} classes (12 for the procedural data), "
                         f"got {n_classes!r}")
    if not hasattr(wrapped, "grid_shape"):
        raise ValueError(f"{key} reads a caption's token grid; it needs conditioner minilm_tokens and the "
                         "grid inner model CLIPImageGridPointDiffusionTransformer")
    from shap_e.models.caption_hint import CaptionHint

    return CaptionHint(wrapped.grid_shape[0], n_classes, attribute, device=device)


def _latent_head(enabled: Any, image_encoder: Optional[nn.Module], d_latent: int, device) -> Optional[nn.Module]:
    """The prior's `LatentHead` (`latent_head: true`), sized to its own image encoder's grid."""
    if not isinstance(enabled, bool):
        raise ValueError(f"latent_head must be true or false, got {enabled!r}")
    if not enabled:
        return None
    if image_encoder is None:
        raise ValueError("latent_head: true needs the prior's own image encoder (conditioner: grid_encoder and an "
                         "image_encoder block)")
    from shap_e.models.image_encoder import LatentHead

    return LatentHead(image_encoder.grid_shape[0], d_latent, device=device)


def _image_encoder(config: Optional[Mapping[str, Any]], device) -> Optional[nn.Module]:
    """The prior's own `ImageGridEncoder` (`conditioner: grid_encoder`), from its `image_encoder:` block."""
    if config is None:
        return None
    from shap_e.models.image_encoder import ImageGridEncoder

    if not isinstance(config, Mapping):
        raise ValueError(f"image_encoder must be a mapping of ImageGridEncoder settings, got {type(config).__name__}")
    check_keys(config, {"image_size", "patch_size", "width", "layers", "heads"}, "image_encoder")
    return ImageGridEncoder(device=device, **config)


def _transmitter(config: Dict[str, Any], device) -> nn.Module:
    from shap_e.models.transmitter.base import build_transmitter

    return build_transmitter(config, device=device)


def _channels_decoder(config: Dict[str, Any], device) -> nn.Module:
    from shap_e.models.transmitter.base import build_channels_decoder

    return build_channels_decoder(config, device=device)


def _renderer(config: Dict[str, Any], device) -> nn.Module:
    from shap_e.models.nerstf.renderer import build_renderer

    return build_renderer(config, device=device)


MODEL_BUILDERS: Dict[str, Callable[[Dict[str, Any], Any], nn.Module]] = {
    "SplitVectorDiffusion": _split_vector_diffusion,
    "Transmitter": _transmitter,
    "ChannelsDecoder": _channels_decoder,
    "NeRSTFRenderer": _renderer,
}


def model_from_config(config: ConfigLike, device: Optional[Union[str, torch.device]] = None) -> nn.Module:
    """Build the model a config describes, with freshly initialised weights.

    :param config: a config dict (the release YAML's content) or a path to a YAML file.
    :param device: where to allocate; `"meta"` builds the structure without memory.
    """
    config = read_config(config)
    device = resolve_device(device)
    name = config.get("name")
    if name not in MODEL_BUILDERS:
        raise ValueError(f"unknown model name {name!r}; valid names: {sorted(MODEL_BUILDERS)}")
    return MODEL_BUILDERS[name](config, device)
