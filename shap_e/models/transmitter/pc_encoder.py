"""Encoders of vector latents from point clouds (not used by the released models).

Real home of the official `shap_e.models.transmitter.pc_encoder`: the vector counterparts of
`shap_e.models.transmitter.channels_encoder` (same blocks; `latent_ctx` output tokens of
`d_latent // latent_ctx` channels each, flattened into one `d_latent` vector).
"""
from abc import abstractmethod
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.generation.perceiver import SimplePerceiver
from shap_e.models.generation.transformer import Transformer
from shap_e.models.transmitter.base import VectorEncoder, check_options
from shap_e.models.transmitter.batch import points_of
from shap_e.models.transmitter.point_inputs import POS_EMBS, PointCloudInputs, add_readout, n_unrolls, run_unrolls
from shap_e.models.nn.encoding import PosEmbLinear
from shap_e.util.collections import AttrDict

__all__ = ["PerceiverEncoder", "PointCloudPerceiverEncoder", "PointCloudTransformerEncoder"]


def _token_width(d_latent: int, latent_ctx: int) -> int:
    if latent_ctx < 1 or d_latent % latent_ctx:
        raise ValueError(f"d_latent={d_latent} must be a multiple of latent_ctx={latent_ctx}")
    return d_latent // latent_ctx


class PointCloudTransformerEncoder(VectorEncoder):
    """Every point is a token (`input_proj`, NeRF-encoded with `pos_emb="nerf"`), followed by
    `latent_ctx` learned tokens through one transformer."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 param_shapes: Dict[str, Tuple[int]], params_proj: Dict[str, Any],
                 latent_bottleneck: Optional[Dict[str, Any]] = None, d_latent: int = 512, latent_ctx: int = 1,
                 input_channels: int = 6, n_ctx: int = 1024, width: int = 512, layers: int = 12, heads: int = 8,
                 init_scale: float = 0.25, pos_emb: Optional[str] = None):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj,
                         latent_bottleneck=latent_bottleneck, d_latent=d_latent)
        if pos_emb not in POS_EMBS:
            raise ValueError(f"pos_emb={pos_emb!r} is unknown; valid: {list(POS_EMBS)}")
        token_width = _token_width(d_latent, latent_ctx)
        self.input_channels, self.n_ctx, self.latent_ctx = input_channels, n_ctx, latent_ctx
        self.ln_pre = nn.LayerNorm(width, device=device, dtype=dtype)
        self.backbone = Transformer(device=device, dtype=dtype, n_ctx=n_ctx + latent_ctx, width=width, layers=layers,
                                    heads=heads, init_scale=init_scale)
        self.ln_post = nn.LayerNorm(width, device=device, dtype=dtype)
        self.output_tokens = nn.Parameter(torch.empty(latent_ctx, width, device=device, dtype=dtype))
        nn.init.normal_(self.output_tokens)
        self.input_proj = PosEmbLinear(pos_emb, input_channels, width, device=device, dtype=dtype)
        self.output_proj = nn.Linear(width, token_width, device=device, dtype=dtype)

    def encode_to_vector(self, batch: Any, options: Optional[AttrDict] = None, *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, d_latent]`."""
        check_options(options)
        h = self.input_proj(points_of(batch).permute(0, 2, 1))
        h = torch.cat([h, self.output_tokens[None].expand(len(h), -1, -1)], dim=1)
        h = self.ln_post(self.backbone(self.ln_pre(h)))
        return self.output_proj(h[:, -self.latent_ctx :]).flatten(1)


class PerceiverEncoder(VectorEncoder):
    """As `PerceiverChannelsEncoder`, with one dataset and `latent_ctx` output tokens of
    `d_latent // latent_ctx` channels, flattened."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 param_shapes: Dict[str, Tuple[int]], params_proj: Dict[str, Any],
                 latent_bottleneck: Optional[Dict[str, Any]] = None, d_latent: int = 512, latent_ctx: int = 1,
                 width: int = 512, layers: int = 12, xattn_layers: int = 1, heads: int = 8, init_scale: float = 0.25,
                 inner_batch_size: int = 1, data_ctx: int = 1, min_unrolls: int = 1, max_unrolls: int = 1):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj,
                         latent_bottleneck=latent_bottleneck, d_latent=d_latent)
        if not 1 <= min_unrolls <= max_unrolls:
            raise ValueError(f"need 1 <= min_unrolls <= max_unrolls, got {min_unrolls}, {max_unrolls}")
        token_width = _token_width(d_latent, latent_ctx)
        self.width, self.dtype, self.latent_ctx = width, dtype, latent_ctx
        self.inner_batch_size, self.data_ctx = (int(inner_batch_size),), data_ctx
        self.min_unrolls, self.max_unrolls = min_unrolls, max_unrolls
        n_ctx = data_ctx + latent_ctx
        self.encoder = SimplePerceiver(device=device, dtype=dtype, n_ctx=n_ctx, n_data=inner_batch_size, width=width,
                                       layers=xattn_layers, heads=heads, init_scale=init_scale)
        self.processor = Transformer(device=device, dtype=dtype, n_ctx=n_ctx, layers=layers - xattn_layers,
                                     width=width, heads=heads, init_scale=init_scale)
        add_readout(self, width, latent_ctx, token_width)

    @abstractmethod
    def get_h_and_iterator(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, Iterator]:
        """The initial tokens `[batch, data_ctx + latent_ctx, width]` (after `ln_pre`) and the iterator
        of `[batch, n_data, width]` dataset chunks."""

    def encode_to_vector(self, batch: Any, options: Optional[AttrDict] = None, *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, d_latent]`."""
        check_options(options)
        h, it = self.get_h_and_iterator(batch, options, generator=generator)
        h = run_unrolls([self.encoder], self.processor, h, it, self.get_n_unrolls(generator))
        return self.output_proj(self.ln_post(h[:, -self.latent_ctx :])).flatten(1)

    def get_n_unrolls(self, generator: Optional[torch.Generator] = None) -> int:
        return n_unrolls(self, generator)


class PointCloudPerceiverEncoder(PointCloudInputs, PerceiverEncoder):
    """The perceiver vector encoder of point clouds: `cross_attention_dataset` `pcl` (the points) or
    `multiview` (camera-modulated patches of the views); the data tokens are the first `data_ctx`
    farthest-point samples. Options as `PointCloudPerceiverChannelsEncoder`."""

    def __init__(self, *, cross_attention_dataset: str = "pcl", fps_method: str = "fps", input_channels: int = 6,
                 pos_emb: Optional[str] = None, image_size: int = 256, patch_size: int = 32, pose_dropout: float = 0.0,
                 use_depth: bool = False, max_depth: float = 5.0, **kwargs: Any):
        if cross_attention_dataset not in ("pcl", "multiview"):
            raise ValueError(f"cross_attention_dataset={cross_attention_dataset!r} is unknown; "
                             "valid: ['multiview', 'pcl']")
        super().__init__(**kwargs)
        self.cross_attention_dataset = cross_attention_dataset
        self.init_inputs(fps_method=fps_method, input_channels=input_channels, pos_emb=pos_emb, image_size=image_size,
                         patch_size=patch_size, pose_dropout=pose_dropout, use_depth=use_depth, max_depth=max_depth)
        if cross_attention_dataset == "multiview":
            self.init_multiview_patches(self.inner_batch_size[0])

    def get_h_and_iterator(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, Iterator]:
        batch = self.as_batch(batch)
        dataset = self.get_pcl_dataset if self.cross_attention_dataset == "pcl" else self.get_multiview_dataset
        return self.initial_tokens(batch, generator), dataset(batch, options, generator=generator)
