"""The transmitter's encoder: point cloud + multiview renders -> latent (docs/behaviour.md#transmitter-encoder).

A perceiver: `latent_ctx` learned query tokens, prefixed by `data_ctx` point-neighbourhood
tokens, read the whole point cloud (cross-attention 0) and the patches of every view
(cross-attention 1), then a self-attention stack; the last `latent_ctx` tokens are projected to
`d_latent` channels. `encode_to_bottleneck` returns the tanh'ed latent that diffusion generates.

The small models use two cheaper options: `cross_attention_dataset="pcl"` reads the points only
(no views, so no renders are needed), and `use_pointconv=False` takes the first `data_ctx`
farthest-point-ordered points as the prefix tokens instead of point-convolution features.
"""
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn as nn

from shap_e.models.nn.encoding import posenc_nerf
from shap_e.models.generation.perceiver import Perceiver
from shap_e.models.generation.transformer import Transformer, is_meta
from shap_e.models.transmitter.bottleneck import build_bottleneck
from shap_e.models.transmitter.params_proj import ChannelsParamsProj, ParamShapes
from shap_e.models.nn.ops import PointSetEmbedding
from shap_e.models.transmitter.batch import MultimodalBatch

POSENC_WIDTH = 3 * (1 + 2 * 15)  # NeRF posenc of a 3-vector, degrees 0..14
# What the cross-attention reads: the release's points + multiview patches, or points only (the
# small models; no renders needed to encode).
DATASETS = ("pcl_and_multiview_pcl", "pcl")


class MultiviewPointEmbed(nn.Conv2d):
    """3x3 conv over per-pixel (colour, ray origin, surface point) features; `unk_token` fills
    pixels without an opaque surface."""

    def __init__(self, out_channels: int, device=None):
        super().__init__(3 * POSENC_WIDTH, out_channels, kernel_size=3, stride=1, padding=1, device=device)
        self.unk_token = nn.Parameter(torch.empty(3 * POSENC_WIDTH, device=device))
        if not is_meta(device):
            nn.init.normal_(self.unk_token, std=0.01)


class PointCloudPerceiverChannelsEncoder(nn.Module):
    def __init__(
        self,
        *,
        param_shapes: ParamShapes,
        params_proj: Dict,
        d_latent: int = 512,
        data_ctx: int = 1024,
        width: int = 512,
        layers: int = 12,
        heads: int = 8,
        init_scale: float = 0.25,
        xattn_layers: int = 1,
        input_channels: int = 6,
        inner_batch_size: Sequence[int] = (16384, 20),
        image_size: int = 256,
        patch_size: int = 8,
        max_depth: float = 5.0,
        pointconv_hidden: Sequence[int] = (512, 512),
        pointconv_patch_size: int = 8,
        pointconv_samples: int = 64,
        pointconv_stride: int = 4,
        pointconv_padding_mode: str = "circular",
        cross_attention_dataset: str = "pcl_and_multiview_pcl",
        use_pointconv: bool = True,
        latent_bottleneck: Optional[Dict] = None,
        device=None,
    ):
        super().__init__()
        if cross_attention_dataset not in DATASETS:
            raise ValueError(f"cross_attention_dataset={cross_attention_dataset!r} is unknown; valid: {DATASETS}")
        if use_pointconv and pointconv_hidden[-1] != width:
            raise ValueError(f"pointconv_hidden[-1]={pointconv_hidden[-1]} must equal width={width}")
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} must be a multiple of patch_size={patch_size}")
        self.param_shapes = dict(param_shapes)
        self.latent_ctx = sum(rows for rows, _ in self.param_shapes.values())
        self.d_latent, self.data_ctx, self.width = d_latent, data_ctx, width
        self.inner_batch_size = (
            (int(inner_batch_size),) if isinstance(inner_batch_size, int) else tuple(inner_batch_size)
        )
        self.image_size, self.patch_size, self.max_depth = image_size, patch_size, max_depth
        self.view_chunk = 4
        self.use_views = cross_attention_dataset == "pcl_and_multiview_pcl"
        self.use_pointconv = use_pointconv
        if not self.use_views:
            self.inner_batch_size = self.inner_batch_size[:1]

        self.params_proj = ChannelsParamsProj(
            param_shapes=self.param_shapes, d_latent=d_latent, device=device, **params_proj
        )
        self.latent_bottleneck = build_bottleneck(latent_bottleneck)
        # Registration order follows the official state dict.
        self.output_tokens = nn.Parameter(torch.empty(self.latent_ctx, width, device=device))
        n_streams = 2 if self.use_views else 1
        self.encoder = nn.ModuleList(
            Perceiver(width, xattn_layers, heads, init_scale, device) for _ in range(n_streams)
        )
        self.processor = Transformer(width, layers - xattn_layers, heads, init_scale, device)
        self.ln_pre = nn.LayerNorm(width, device=device)
        self.ln_post = nn.LayerNorm(width, device=device)
        self.output_proj = nn.Linear(width, d_latent, device=device)
        self.input_proj = nn.Linear(input_channels * 31, width, device=device)
        if use_pointconv:
            self.point_conv = PointSetEmbedding(
                n_point=data_ctx,
                n_sample=pointconv_samples,
                d_input=width,
                hidden=pointconv_hidden,
                patch_size=pointconv_patch_size,
                stride=pointconv_stride,
                padding_mode=pointconv_padding_mode,
                device=device,
            )
        if self.use_views:
            self.mv_pcl_embed = MultiviewPointEmbed(width // 2, device=device)
            self.patch_emb = nn.Conv2d(width // 2, width, kernel_size=patch_size, stride=patch_size, device=device)
        if not is_meta(device):
            nn.init.normal_(self.output_tokens)

    def batch_options(self) -> Dict[str, Any]:
        """What `load_or_create_multimodal_batch` must produce for this encoder: the point count,
        and the views only when the encoder reads them."""
        if not self.use_views:
            return dict(point_count=self.inner_batch_size[0], mv_light_mode=None)
        return dict(
            point_count=self.inner_batch_size[0], mv_light_mode="basic",
            mv_num_views=self.inner_batch_size[1], mv_image_size=self.image_size,
        )

    def point_features(self, points: torch.Tensor) -> torch.Tensor:
        """`[batch, 6, n_points]` -> `[batch, n_points, width]`."""
        return self.input_proj(posenc_nerf(points.permute(0, 2, 1), 0, 15))

    def point_stream(self, points: torch.Tensor, generator) -> torch.Tensor:
        """Cross-attention data 0: features of `inner_batch_size[0]` shuffled points."""
        features = self.point_features(points)
        index = torch.stack(
            [torch.randperm(points.shape[2], generator=generator).to(points.device) for _ in range(points.shape[0])]
        )[:, : self.inner_batch_size[0]]
        return torch.gather(features, 1, index[..., None].expand(-1, -1, features.shape[-1]))

    def multiview_pixels(
        self, views: torch.Tensor, depths: torch.Tensor, alphas: torch.Tensor, rays: torch.Tensor, cam_z: torch.Tensor
    ) -> torch.Tensor:
        """Per-pixel features `[n, 279, size, size]` of `n` images (docs/behaviour.md#multiview-features).

        views `[n, 3, S, S]`, depths and alphas `[n, 1, S, S]`, rays `[n, S, S, 2, 3]`, cam_z `[n, 3]`.
        """
        origin, direction = rays[..., 0, :], rays[..., 1, :]
        depth = depths.clamp(max=self.max_depth).permute(0, 2, 3, 1)
        position = origin + direction * (depth / torch.sum(direction * cam_z[:, None, None], dim=-1, keepdim=True))
        colour = views.permute(0, 2, 3, 1)
        features = torch.cat(
            [posenc_nerf(colour, 0, 15), posenc_nerf(origin, 0, 15), posenc_nerf(position, 0, 15)], dim=-1
        )
        mask = alphas.permute(0, 2, 3, 1) >= 0.999
        features = torch.where(mask, features, self.mv_pcl_embed.unk_token.to(features.dtype))
        return features.permute(0, 3, 1, 2)

    def multiview_stream(self, batch: MultimodalBatch, generator) -> torch.Tensor:
        """Cross-attention data 1: patch tokens of `inner_batch_size[1]` shuffled views.

        Images go through the per-pixel embedding `view_chunk` at a time (convolutions are
        per image), which bounds memory: the full-size features are 1.5 GB per 20 views.
        """
        if batch.views is None or batch.depths is None or batch.view_alphas is None or batch.cameras is None:
            raise ValueError("the batch needs views, depths, view_alphas and cameras for the multiview stream")
        n_batch, n_views, _, size, _ = batch.views.shape
        if size != self.image_size or batch.cameras.width != size:
            raise ValueError(f"views must be {self.image_size}x{self.image_size} (image_size), got {size}x{size}")
        n_images = n_batch * n_views
        views = batch.views.reshape(n_images, *batch.views.shape[2:])
        depths = batch.depths.reshape(n_images, *batch.depths.shape[2:])
        alphas = batch.view_alphas.reshape(n_images, *batch.view_alphas.shape[2:])
        rays = batch.cameras.rays().view(n_images, size, size, 2, 3).to(views.device)
        cam_z = batch.cameras.z.to(views.device)
        tokens = []
        for s in range(0, n_images, self.view_chunk):
            e = s + self.view_chunk
            pixels = self.multiview_pixels(views[s:e], depths[s:e], alphas[s:e], rays[s:e], cam_z[s:e])
            tokens.append(self.patch_emb(self.mv_pcl_embed(pixels)))  # [chunk, width, size/P, size/P]
        h = torch.cat(tokens).view(n_batch, n_views, self.width, -1).permute(0, 1, 3, 2)
        index = torch.stack(
            [torch.randperm(n_views, generator=generator).to(h.device) for _ in range(n_batch)]
        )[:, : self.inner_batch_size[1]]
        h = torch.gather(h, 1, index[:, :, None, None].expand(-1, -1, *h.shape[2:]))
        return h.reshape(n_batch, -1, self.width)

    def encode_to_channels(self, batch: MultimodalBatch, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Pre-bottleneck latent `[batch, latent_ctx, d_latent]`.

        Random draws (reference order, docs/behaviour.md#encoder-randomness): the point-conv shuffles,
        one `randperm` of the points per batch element, one `randperm` of the views per batch element.
        """
        points = batch.points
        if self.use_pointconv:
            features = self.point_features(points).permute(0, 2, 1)
            data_tokens = self.point_conv(points[:, :3], features, generator).permute(0, 2, 1)
        else:  # the first `data_ctx` points of the farthest-point ordering
            data_tokens = self.point_features(points[:, :, : self.data_ctx])
        queries = self.output_tokens[None].expand(points.shape[0], -1, -1)
        h = self.ln_pre(torch.cat([data_tokens, queries], dim=1))
        h = self.encoder[0](h, self.point_stream(points, generator))
        if self.use_views:
            h = self.encoder[1](h, self.multiview_stream(batch, generator))
        h = self.processor(h)
        return self.output_proj(self.ln_post(h[:, -self.latent_ctx :]))

    def encode_to_bottleneck(self, batch: MultimodalBatch, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, latent_ctx * d_latent]` token-major latent in (-1, 1)."""
        return self.latent_bottleneck(self.encode_to_channels(batch, generator).flatten(1), generator=generator)

    def bottleneck_to_params(self, latent: torch.Tensor) -> Dict[str, torch.Tensor]:
        """`[batch, latent_ctx * d_latent]` -> NeRSTF meta weights `{name: [batch, rows, cols]}`."""
        return self.params_proj(latent)

    def forward(self, batch: MultimodalBatch, generator: Optional[torch.Generator] = None) -> Dict[str, torch.Tensor]:
        return self.bottleneck_to_params(self.encode_to_bottleneck(batch, generator))
