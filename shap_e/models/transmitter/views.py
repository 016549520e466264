"""Tokens of multiview renders for the transmitter encoders (docs/behaviour.md#multiview-features).

Two embeddings of a view: the release's "multiview point cloud" (every opaque pixel is the surface
point its depth puts on the camera ray, NeRF-encoded with its colour and the ray origin, then a 3x3
conv), and the plain "multiview" patches of colours (and depth) modulated by an embedding of the
camera. Both end in a patchify conv: `[batch, n_views, n_patches, width]` tokens, row-major patches.
"""
from typing import Optional

import torch
import torch.nn as nn

from shap_e.models.nn.encoding import posenc_nerf
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.util.rng import draw_device

__all__ = ["POSENC_WIDTH", "MultiviewPointEmbed", "encode_multiview_pcl", "encode_views", "patch_tokens"]

POSENC_WIDTH = 3 * (1 + 2 * 15)  # NeRF posenc of a 3-vector, degrees 0..14
# Images per call of the per-pixel embedding: its full-size features are 1.5 GB per 20 release views.
VIEW_CHUNK = 4


class MultiviewPointEmbed(nn.Conv2d):
    """3x3 conv over per-pixel (colour, ray origin, surface point) NeRF features; `unk_token` fills
    pixels without an opaque surface (`alpha < 0.999`)."""

    def __init__(self, out_channels: int, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None):
        super().__init__(3 * POSENC_WIDTH, out_channels, kernel_size=3, stride=1, padding=1, device=device, dtype=dtype)
        self.unk_token = nn.Parameter(torch.empty(3 * POSENC_WIDTH, device=device, dtype=dtype))
        nn.init.normal_(self.unk_token, std=0.01)

    def pixel_features(self, views: torch.Tensor, depths: torch.Tensor, alphas: torch.Tensor, rays: torch.Tensor,
                       cam_z: torch.Tensor, max_depth: float, use_distance: bool = True) -> torch.Tensor:
        """Per-pixel features `[n, 279, S, S]` of `n` images (docs/behaviour.md#multiview-features).

        views `[n, 3, S, S]` in [-1, 1], z-depths and alphas `[n, 1, S, S]`, rays `[n, S, S, 2, 3]`
        (origin, unit direction), cam_z `[n, 3]`. `use_distance=False` puts the point at the depth
        along the ray instead of converting z-depth to distance (the reference's "incorrect" variant).
        """
        origin, direction = rays[..., 0, :], rays[..., 1, :]
        depth = depths.clamp(max=max_depth).permute(0, 2, 3, 1)
        if use_distance:
            depth = depth / torch.sum(direction * cam_z[:, None, None], dim=-1, keepdim=True)
        position = origin + direction * depth
        colour = views.permute(0, 2, 3, 1)
        features = torch.cat([posenc_nerf(colour, 0, 15), posenc_nerf(origin, 0, 15), posenc_nerf(position, 0, 15)],
                             dim=-1)
        mask = alphas.permute(0, 2, 3, 1) >= 0.999
        features = torch.where(mask, features, self.unk_token.to(features.dtype))
        return features.permute(0, 3, 1, 2)


def patch_tokens(images: torch.Tensor, patch_emb: nn.Conv2d) -> torch.Tensor:
    """`[n, C, S, S]` -> `[n, (S / P)^2, width]` with the patchify conv `patch_emb` (kernel = stride = P)."""
    h = patch_emb(images)
    return h.flatten(2).permute(0, 2, 1)


def _check_renders(batch: MultimodalBatch, image_size: int, needs_alphas: bool) -> None:
    missing = [name for name in ("views", "depths", "cameras") + (("view_alphas",) if needs_alphas else ())
               if getattr(batch, name) is None]
    if missing:
        raise ValueError(f"the batch needs {', '.join(missing)} for the multiview stream of this encoder")
    size = batch.views.shape[-1]
    if batch.views.dim() != 5 or size != image_size or batch.cameras.width != size:
        raise ValueError(f"views must be [batch, n_views, 3, {image_size}, {image_size}] (image_size) with cameras "
                         f"of that resolution, got views {list(batch.views.shape)}, cameras {batch.cameras.width} px")


def encode_multiview_pcl(batch: MultimodalBatch, embed: MultiviewPointEmbed, patch_emb: nn.Conv2d, image_size: int,
                         max_depth: float, use_distance: bool = True) -> torch.Tensor:
    """`[batch, n_views, n_patches, width]` multiview point-cloud tokens (docs/behaviour.md#multiview-features).

    Images go through the per-pixel embedding `VIEW_CHUNK` at a time, which bounds memory.
    """
    _check_renders(batch, image_size, needs_alphas=True)
    n_batch, n_views, _, size, _ = batch.views.shape
    n_images = n_batch * n_views
    views = batch.views.reshape(n_images, *batch.views.shape[2:])
    depths = batch.depths.reshape(n_images, *batch.depths.shape[2:])
    alphas = batch.view_alphas.reshape(n_images, *batch.view_alphas.shape[2:])
    rays = batch.cameras.rays().view(n_images, size, size, 2, 3).to(views.device)
    cam_z = batch.cameras.z.to(views.device)
    tokens = []
    for s in range(0, n_images, VIEW_CHUNK):
        e = s + VIEW_CHUNK
        pixels = embed.pixel_features(views[s:e], depths[s:e], alphas[s:e], rays[s:e], cam_z[s:e], max_depth,
                                      use_distance)
        tokens.append(patch_tokens(embed(pixels), patch_emb))
    tokens = torch.cat(tokens)
    return tokens.view(n_batch, n_views, *tokens.shape[1:])


def encode_views(images: torch.Tensor, cameras: torch.Tensor, patch_emb: nn.Conv2d, camera_emb: nn.Module,
                 pose_dropout: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """`[batch, n_views, n_patches, width]` patch tokens of `images [batch, n_views, C, S, S]`, each
    view's scaled and shifted by `camera_emb(cameras)` (`cameras [batch, n_views, 13]` -> `2 * width`).

    A whole element's camera modulation is dropped with probability `pose_dropout` (0 in eval); the
    `rand` is drawn in any case, as in the reference.
    """
    n_batch, n_views = images.shape[:2]
    tokens = patch_tokens(images.reshape(n_batch * n_views, *images.shape[2:]), patch_emb)
    tokens = tokens.view(n_batch, n_views, *tokens.shape[1:])
    camera = camera_emb(cameras.to(tokens.device, tokens.dtype)).view(n_batch, n_views, 1, -1)
    draw = torch.rand(n_batch, 1, 1, 1, generator=generator, device=draw_device(generator, tokens.device))
    camera = torch.where(draw.to(tokens.device) >= pose_dropout, camera, torch.zeros_like(camera))
    scale, shift = camera.chunk(2, dim=3)
    return tokens * (scale + 1.0) + shift
