"""Build any Shap-E model from its config (a dict or a YAML file), through one explicit table.

Real home of the official `shap_e.models.configs.model_from_config`. Configs are the constructor
keyword arguments of the official release (`shap_e/configs/*.yaml`), plus `name`; nested models
(`inner`, `encoder`, `renderer`) are configs themselves. Unknown names and keys raise errors that
list the valid ones.
"""
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

import torch
import torch.nn as nn

from shap_e.models.generation.latent_diffusion import SplitVectorDiffusion
from shap_e.models.generation.perceiver import PointDiffusionPerceiver
from shap_e.models.generation.pooled_mlp import PooledMLP
from shap_e.models.generation.transformer import (
    CLIPImageGridPointDiffusionTransformer, CLIPImageGridUpsamplePointDiffusionTransformer,
    CLIPImagePointDiffusionTransformer, PointDiffusionTransformer, UpsamplePointDiffusionTransformer,
)
from shap_e.models.nerf.model import MLPNeRFModel, VoidNeRFModel
from shap_e.models.nerf.renderer import OneStepNeRFRenderer, TwoStepNeRFRenderer
from shap_e.models.stf.mlp import MLPSDFModel, MLPTextureFieldModel
from shap_e.models.stf.renderer import STFRenderer
from shap_e.models.transmitter.base import ChannelsDecoder, Transmitter, VectorDecoder, meta_param_shapes
from shap_e.models.transmitter.channels_encoder import (
    PointCloudPerceiverChannelsEncoder, PointCloudTransformerChannelsEncoder,
)
from shap_e.models.transmitter.multiview_encoder import MultiviewTransformerEncoder
from shap_e.models.transmitter.pc_encoder import PointCloudPerceiverEncoder, PointCloudTransformerEncoder
from shap_e.models.volume import BoundingBoxVolume, SphericalVolume, UnboundedVolume
from shap_e.util.config import ConfigLike, check_keys, read_config, resolve_device

__all__ = ["MODEL_BUILDERS", "constructor_keys", "model_from_config"]

Builder = Callable[[Dict[str, Any], Any], nn.Module]


def constructor_keys(cls: type) -> Set[str]:
    """The keyword arguments `cls(...)` accepts, following `**kwargs` up the class hierarchy
    (`device` and `dtype` are not config keys)."""
    keys: Set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        keys |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return keys - {"self", "device", "dtype"}


def _constructor(cls: type) -> Builder:
    """A builder of `cls`: the config's keys checked, then `cls(device=..., **config)`."""

    def build(config: Dict[str, Any], device) -> nn.Module:
        check_keys(config, constructor_keys(cls) | {"name"}, cls.__name__)
        return cls(device=device, **{k: v for k, v in config.items() if k != "name"})

    return build


def _split_vector_diffusion(config: Dict[str, Any], device) -> nn.Module:
    check_keys(
        config, {"name", "d_latent", "latent_ctx", "inner", "conditioner", "image_encoder", "latent_head",
                 "text_layers", "colour_hint", "category_hint"},
        "SplitVectorDiffusion",
    )
    d_latent, latent_ctx = config["d_latent"], config.get("latent_ctx", 1)
    if latent_ctx < 1 or d_latent % latent_ctx:
        raise ValueError(f"d_latent={d_latent} must be a multiple of latent_ctx={latent_ctx}")
    channels = d_latent // latent_ctx
    if not isinstance(config.get("inner"), Mapping):
        raise ValueError("SplitVectorDiffusion needs an `inner:` model config (e.g. name: "
                         "CLIPImagePointDiffusionTransformer)")
    inner = dict(config["inner"], input_channels=channels, output_channels=2 * channels, n_ctx=latent_ctx)
    wrapped = model_from_config(inner, device)
    image_encoder = _image_encoder(config.get("image_encoder"), device)
    return SplitVectorDiffusion(
        device=device, wrapped=wrapped, n_ctx=latent_ctx, d_latent=d_latent,
        conditioner=config.get("conditioner", "clip"), image_encoder=image_encoder,
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


def _sub_config(config: Dict[str, Any], key: str, owner: str) -> Dict[str, Any]:
    value = config.get(key)
    if not isinstance(value, Mapping) or "name" not in value:
        raise ValueError(f"{owner} needs a `{key}:` model config with a name")
    return dict(value)


def _transmitter(config: Dict[str, Any], device) -> nn.Module:
    """Encoder and renderer; the encoder projects to the renderer's latent-generated weights."""
    check_keys(config, {"name", "encoder", "renderer"}, "Transmitter")
    renderer_config = _sub_config(config, "renderer", "Transmitter")
    # The encoder is built (and randomly initialised) first; the renderer's shapes come from a weightless copy.
    param_shapes = meta_param_shapes(model_from_config(renderer_config, "meta"))
    encoder = model_from_config(dict(_sub_config(config, "encoder", "Transmitter"), param_shapes=param_shapes), device)
    return Transmitter(encoder=encoder, renderer=model_from_config(renderer_config, device))


def _decoder(cls: type) -> Builder:
    """`VectorDecoder` / `ChannelsDecoder`: the renderer, then the params projection to its weights."""

    def build(config: Dict[str, Any], device) -> nn.Module:
        check_keys(config, constructor_keys(cls) - {"param_shapes"} | {"name"}, cls.__name__)
        renderer = model_from_config(_sub_config(config, "renderer", cls.__name__), device)
        rest = {k: v for k, v in config.items() if k not in ("name", "renderer")}
        return cls(device=device, param_shapes=meta_param_shapes(renderer), renderer=renderer, **rest)

    return build


def _nested(cls: type, model_keys: Tuple[str, ...]) -> Builder:
    """A builder of `cls` whose `model_keys` entries (those given) are model configs, built first."""

    def build(config: Dict[str, Any], device) -> nn.Module:
        check_keys(config, constructor_keys(cls) | {"name"}, cls.__name__)
        kwargs = {k: v for k, v in config.items() if k != "name"}
        for key in model_keys:
            if kwargs.get(key) is not None:
                kwargs[key] = model_from_config(_sub_config(config, key, cls.__name__), device)
        return cls(device=device, **kwargs)

    return build


def _renderer(config: Dict[str, Any], device) -> nn.Module:
    from shap_e.models.nerstf.renderer import build_renderer

    return build_renderer(config, device=device)


# Every model name a config may use. Encoders get `param_shapes` from their Transmitter.
MODEL_BUILDERS: Dict[str, Builder] = {
    "SplitVectorDiffusion": _split_vector_diffusion,
    "PointDiffusionTransformer": _constructor(PointDiffusionTransformer),
    "CLIPImagePointDiffusionTransformer": _constructor(CLIPImagePointDiffusionTransformer),
    "CLIPImageGridPointDiffusionTransformer": _constructor(CLIPImageGridPointDiffusionTransformer),
    "UpsamplePointDiffusionTransformer": _constructor(UpsamplePointDiffusionTransformer),
    "CLIPImageGridUpsamplePointDiffusionTransformer": _constructor(CLIPImageGridUpsamplePointDiffusionTransformer),
    "PointDiffusionPerceiver": _constructor(PointDiffusionPerceiver),
    "PooledMLP": _constructor(PooledMLP),
    "Transmitter": _transmitter,
    "VectorDecoder": _decoder(VectorDecoder),
    "ChannelsDecoder": _decoder(ChannelsDecoder),
    "PointCloudPerceiverChannelsEncoder": _constructor(PointCloudPerceiverChannelsEncoder),
    "PointCloudTransformerChannelsEncoder": _constructor(PointCloudTransformerChannelsEncoder),
    "PointCloudPerceiverEncoder": _constructor(PointCloudPerceiverEncoder),
    "PointCloudTransformerEncoder": _constructor(PointCloudTransformerEncoder),
    "MultiviewTransformerEncoder": _constructor(MultiviewTransformerEncoder),
    "NeRSTFRenderer": _renderer,
    "VoidNeRFModel": _constructor(VoidNeRFModel),
    "MLPNeRFModel": _constructor(MLPNeRFModel),
    "MLPSDFModel": _constructor(MLPSDFModel),
    "MLPTextureFieldModel": _constructor(MLPTextureFieldModel),
    "BoundingBoxVolume": _constructor(BoundingBoxVolume),
    "SphericalVolume": _constructor(SphericalVolume),
    "UnboundedVolume": _constructor(UnboundedVolume),
    "OneStepNeRFRenderer": _nested(
        OneStepNeRFRenderer, ("void_model", "foreground_model", "background_model", "volume", "outer_volume")
    ),
    "TwoStepNeRFRenderer": _nested(TwoStepNeRFRenderer, (
        "void_model", "fine_model", "coarse_model", "coarse_background_model", "fine_background_model", "volume",
        "outer_volume",
    )),
    "STFRenderer": _nested(STFRenderer, ("sdf", "tf", "volume")),
}


def model_from_config(config: ConfigLike, device: Optional[Union[str, torch.device]] = None) -> nn.Module:
    """Build the model a config describes, with freshly initialised weights.

    :param config: a config dict (the release YAML's content) or a path to a YAML file.
    :param device: where to allocate (default CPU); `"meta"` builds the structure without memory.
    """
    config = read_config(config)
    device = resolve_device(device)
    name = config.get("name")
    if name not in MODEL_BUILDERS:
        raise ValueError(f"unknown model name {name!r}; valid names: {sorted(MODEL_BUILDERS)}")
    return MODEL_BUILDERS[name](config, device)
