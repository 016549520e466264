"""`MultiviewTransformerEncoder`: a vector latent from posed views (not used by the released models).

Real home of the official `shap_e.models.transmitter.multiview_encoder`. Every view contributes its
patch tokens and one camera token (`camera_emb` of its 13 camera numbers); with `pos_emb` added they
are followed by `latent_ctx` learned tokens through one transformer.
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.generation.transformer import Transformer
from shap_e.models.transmitter.base import VectorEncoder, check_options
from shap_e.models.transmitter.batch import camera_vectors
from shap_e.models.transmitter.point_inputs import ViewInputs
from shap_e.models.transmitter.views import patch_tokens
from shap_e.util.collections import AttrDict

__all__ = ["MultiviewTransformerEncoder"]


class MultiviewTransformerEncoder(ViewInputs, VectorEncoder):
    """`encode_to_vector(batch) -> [batch, d_latent]` from `num_views` views of `image_size` pixels
    (colours, and normalised depth with `use_depth`) and their cameras."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 param_shapes: Dict[str, Tuple[int]], params_proj: Dict[str, Any],
                 latent_bottleneck: Optional[Dict[str, Any]] = None, d_latent: int = 512, latent_ctx: int = 1,
                 num_views: int = 20, image_size: int = 256, patch_size: int = 32, use_depth: bool = False,
                 max_depth: float = 5.0, width: int = 512, layers: int = 12, heads: int = 8, init_scale: float = 0.25,
                 pos_emb_init_scale: float = 1.0):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj,
                         latent_bottleneck=latent_bottleneck, d_latent=d_latent)
        if latent_ctx < 1 or d_latent % latent_ctx:
            raise ValueError(f"d_latent={d_latent} must be a multiple of latent_ctx={latent_ctx}")
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} must be a multiple of patch_size={patch_size}")
        self.num_views, self.image_size, self.patch_size = num_views, image_size, patch_size
        self.use_depth, self.max_depth, self.width, self.latent_ctx = use_depth, max_depth, width, latent_ctx
        self.n_ctx = num_views * (1 + (image_size // patch_size) ** 2)
        self.ln_pre = nn.LayerNorm(width, device=device, dtype=dtype)
        self.backbone = Transformer(device=device, dtype=dtype, n_ctx=self.n_ctx + latent_ctx, width=width,
                                    layers=layers, heads=heads, init_scale=init_scale)
        self.ln_post = nn.LayerNorm(width, device=device, dtype=dtype)
        self.output_tokens = nn.Parameter(torch.empty(latent_ctx, width, device=device, dtype=dtype))
        nn.init.normal_(self.output_tokens)
        self.pos_emb = nn.Parameter(torch.empty(self.n_ctx, width, device=device, dtype=dtype))
        nn.init.normal_(self.pos_emb, std=pos_emb_init_scale)
        self.patch_emb = nn.Conv2d(4 if use_depth else 3, width, patch_size, stride=patch_size, device=device,
                                   dtype=dtype)
        self.camera_emb = nn.Sequential(nn.Linear(13, width, device=device, dtype=dtype), nn.GELU(),
                                        nn.Linear(width, width, device=device, dtype=dtype))
        self.output_proj = nn.Linear(width, d_latent // latent_ctx, device=device, dtype=dtype)

    def encode_to_vector(self, batch: Any, options: Optional[AttrDict] = None, *,
                         generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, d_latent]`: per view its patch tokens then its camera token, plus `pos_emb`, then
        the learned tokens; the transformer's last `latent_ctx` outputs, projected and flattened."""
        check_options(options)
        batch = self.as_batch(batch)
        images = self.view_images(batch)
        n_batch, n_views = images.shape[:2]
        if n_views != self.num_views:
            raise ValueError(f"the batch has {n_views} views; this encoder reads num_views={self.num_views}")
        tokens = patch_tokens(images.reshape(n_batch * n_views, *images.shape[2:]), self.patch_emb)
        tokens = tokens.view(n_batch, n_views, -1, self.width)
        cameras = self.camera_emb(camera_vectors(batch.cameras).to(tokens)).view(n_batch, n_views, 1, self.width)
        h = torch.cat([tokens, cameras], dim=2).reshape(n_batch, -1, self.width) + self.pos_emb
        h = torch.cat([h, self.output_tokens[None].expand(n_batch, -1, -1)], dim=1)
        h = self.ln_post(self.backbone(self.ln_pre(h)))
        return self.output_proj(h[:, self.n_ctx :]).flatten(1)
