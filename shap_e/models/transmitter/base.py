"""Encoders, the `Transmitter` (encoder + renderer) and the decoders (params projection + renderer).

Real home of the official `shap_e.models.transmitter.base`. Every encoder turns a batch into a
latent (`encode_to_bottleneck`) and a latent into renderer weights (`bottleneck_to_params`); the
decoders only do the second. Batches are `MultimodalBatch`es or the official `AttrDict`s, converted
once at the boundary (`shap_e.models.transmitter.batch.as_multimodal_batch`). `options` (an official
`AttrDict` of per-call settings) is accepted everywhere and read by none of the release's modules;
random draws come from `generator` (None: the global RNG, as the reference).
"""
from abc import ABC, abstractmethod
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.nn.meta import MetaModule
from shap_e.models.transmitter.bottleneck import latent_bottleneck_from_config, latent_warp_from_config
from shap_e.models.transmitter.params_proj import ParamShapes, flatten_param_shapes, params_proj_from_config
from shap_e.util.collections import AttrDict

__all__ = ["ChannelsDecoder", "ChannelsEncoder", "Encoder", "Transmitter", "VectorDecoder", "VectorEncoder",
           "check_options", "meta_param_shapes"]

IDENTITY = {"name": "identity"}


def check_options(options: Any) -> None:
    """`options` is the official per-call `AttrDict` (or None); a generator belongs in `generator=`."""
    if options is not None and not isinstance(options, Mapping):
        hint = "; pass a torch.Generator as generator=..." if isinstance(options, torch.Generator) else ""
        raise TypeError(f"options must be an AttrDict (or None), got {type(options).__name__}{hint}")


def meta_param_shapes(renderer: nn.Module) -> Dict[str, Tuple[int, ...]]:
    """The shapes of the weights a latent supplies to `renderer`: the meta parameters and buffers of
    its `MetaModule`s, by their paths (`nerstf.mlp.0.weight`, ...), in module order."""
    shapes = {
        name: tuple(tensor.shape)
        for path, module in renderer.named_modules() if isinstance(module, MetaModule)
        for name, tensor in module.meta_state_dict(prefix=path, recurse=False).items()
    }
    if not shapes:
        raise ValueError(f"{type(renderer).__name__} has no latent-generated (meta) parameters to project to")
    return shapes


class Encoder(nn.Module, ABC):
    """Base of the encoders: `param_shapes` are the renderer weights the latent must supply."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes):
        super().__init__()
        self.param_shapes = dict(param_shapes)
        self.device = device

    @abstractmethod
    def forward(self, batch: Any, options: Optional[AttrDict] = None, *,
                generator: Optional[torch.Generator] = None) -> AttrDict:
        """A batch -> renderer weights `{name: [batch, *shape]}`."""


class VectorEncoder(Encoder):
    """An encoder whose latent is one vector per element: `encode_to_vector`, then the bottleneck
    (default: identity) and the warp (default: identity)."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes,
                 params_proj: Dict[str, Any], d_latent: int, latent_bottleneck: Optional[Dict[str, Any]] = None,
                 latent_warp: Optional[Dict[str, Any]] = None):
        super().__init__(device=device, param_shapes=param_shapes)
        self.d_latent = d_latent
        self.params_proj = params_proj_from_config(params_proj, device=device, param_shapes=self.param_shapes,
                                                   d_latent=d_latent)
        self.latent_bottleneck = latent_bottleneck_from_config(latent_bottleneck or IDENTITY, device=device,
                                                               d_latent=d_latent)
        self.latent_warp = latent_warp_from_config(latent_warp or IDENTITY, device=device)

    def forward(self, batch: Any, options: Optional[AttrDict] = None, *,
                generator: Optional[torch.Generator] = None) -> AttrDict:
        check_options(options)
        return self.bottleneck_to_params(self.encode_to_bottleneck(batch, options, generator=generator), options)

    def encode_to_bottleneck(self, batch: Any, options: Optional[AttrDict] = None, *,
                             generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, latent size]`: the latent that the diffusion models generate."""
        check_options(options)
        vector = self.encode_to_vector(batch, options, generator=generator)
        return self.latent_warp.warp(self.latent_bottleneck(vector, options, generator=generator), options)

    @abstractmethod
    def encode_to_vector(self, batch: Any, options: Optional[AttrDict] = None, *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, latent size]` before the bottleneck."""

    def bottleneck_to_params(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """A latent -> renderer weights `{name: [batch, *shape]}`."""
        return self.params_proj(self.latent_warp.unwarp(vector, options), options)


def _to_channels(vector: torch.Tensor, latent_ctx: int, d_latent: Optional[int]) -> torch.Tensor:
    """`[batch, latent_ctx * d_latent]` (token-major) -> `[batch, latent_ctx, d_latent]`."""
    expected = None if d_latent is None else latent_ctx * d_latent
    if vector.dim() != 2 or (expected is not None and vector.shape[1] != expected) or vector.shape[1] % latent_ctx:
        size = expected or f"{latent_ctx} * d_latent"
        raise ValueError(f"latent must have shape [batch, {size}] ({latent_ctx} tokens), got {list(vector.shape)}")
    return vector.view(vector.shape[0], latent_ctx, -1)


class ChannelsEncoder(VectorEncoder):
    """An encoder whose latent is `latent_ctx` tokens of `d_latent` channels, one token per row of
    the renderer weights (`latent_ctx` = their total number of rows)."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes,
                 params_proj: Dict[str, Any], d_latent: int, latent_bottleneck: Optional[Dict[str, Any]] = None,
                 latent_warp: Optional[Dict[str, Any]] = None):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj, d_latent=d_latent,
                         latent_bottleneck=latent_bottleneck, latent_warp=latent_warp)
        self.flat_shapes = flatten_param_shapes(self.param_shapes)
        self.latent_ctx = sum(vectors for vectors, _ in self.flat_shapes.values())

    @abstractmethod
    def encode_to_channels(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, latent_ctx, d_latent]` before the bottleneck."""

    def encode_to_vector(self, batch: Any, options: Optional[AttrDict] = None, *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
        check_options(options)
        return self.encode_to_channels(batch, options, generator=generator).flatten(1)

    def bottleneck_to_channels(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        """`[batch, latent_ctx * d_latent]` -> `[batch, latent_ctx, d_latent]`."""
        return _to_channels(vector, self.latent_ctx, self.d_latent)

    def bottleneck_to_params(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        return self.params_proj(self.bottleneck_to_channels(self.latent_warp.unwarp(vector, options)), options)


class Transmitter(nn.Module):
    """An encoder and the renderer that draws what its latents decode to."""

    def __init__(self, encoder: Encoder, renderer: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.renderer = renderer

    def forward(self, batch: Any, options: Optional[AttrDict] = None, *,
                generator: Optional[torch.Generator] = None) -> AttrDict:
        """A batch -> renderer weights `{name: [batch, *shape]}` (what training differentiates; render
        them with `renderer.render_views`)."""
        return self.encoder(batch, options, generator=generator)

    def encode_to_bottleneck(self, batch: Any, options: Optional[AttrDict] = None, *,
                             generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """The encoder's latent of `batch` (see `VectorEncoder.encode_to_bottleneck`)."""
        return self.encoder.encode_to_bottleneck(batch, options, generator=generator)

    def bottleneck_to_params(self, latent: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """A latent `[batch, latent size]` -> renderer weights `{name: [batch, *shape]}`."""
        return self.encoder.bottleneck_to_params(latent, options)


class VectorDecoder(nn.Module):
    """A latent vector -> renderer weights (params projection after the inverse warp), and the renderer."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes,
                 params_proj: Dict[str, Any], d_latent: int, latent_warp: Optional[Dict[str, Any]] = None,
                 renderer: nn.Module):
        super().__init__()
        self.device = device
        self.param_shapes = dict(param_shapes)
        self.d_latent = d_latent
        self.params_proj = params_proj_from_config(params_proj, device=device, param_shapes=self.param_shapes,
                                                   d_latent=d_latent)
        self.latent_warp = latent_warp_from_config(latent_warp or IDENTITY, device=device)
        self.renderer = renderer

    def bottleneck_to_params(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """`[batch, d_latent]` -> renderer weights `{name: [batch, *shape]}`."""
        return self.params_proj(self.latent_warp.unwarp(vector, options), options)


class ChannelsDecoder(VectorDecoder):
    """The decoder of channel latents: `latent_ctx` tokens of `d_latent` channels (the release's
    `vector_decoder`, docs/behaviour.md#checkpoints)."""

    def __init__(self, *, latent_ctx: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.latent_ctx = latent_ctx
        rows = getattr(self.params_proj, "latent_ctx", latent_ctx)
        if rows != latent_ctx:
            raise ValueError(f"latent_ctx={latent_ctx} does not match the renderer's meta weights ({rows} rows)")

    def bottleneck_to_channels(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        """`[batch, latent_ctx * d_latent]` -> `[batch, latent_ctx, d_latent]`."""
        return _to_channels(vector, self.latent_ctx, self.d_latent)

    def bottleneck_to_params(self, vector: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        return self.params_proj(self.bottleneck_to_channels(self.latent_warp.unwarp(vector, options)), options)
