"""Tokens of multiview renders for the transmitter encoders (docs/behaviour.md#multiview-features).

Two embeddings of a view: the release's "multiview point cloud" (every opaque pixel is the surface
point its depth puts on the camera ray, NeRF-encoded with its colour and the ray origin, then a 3x3
conv: `shap_e.models.nn.encoding.MultiviewPointCloudEmbedding`), and the plain "multiview" patches
of colours (and depth) modulated by an embedding of the camera. Both end in a patchify conv:
`[batch, n_views, n_patches, width]` tokens, row-major patches.
"""
from typing import Optional

import torch
import torch.nn as nn

from shap_e.models.nn.encoding import MultiviewPointCloudEmbedding
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.util.rng import draw_device

__all__ = ["encode_multiview_pcl", "encode_views", "patch_tokens", "surface_points"]

# Images per call of the per-pixel embedding: its full-size features are 1.5 GB per 20 release views.
VIEW_CHUNK = 4


def surface_points(depths: torch.Tensor, rays: torch.Tensor, cam_z: torch.Tensor, max_depth: float,
                   use_distance: bool = True) -> torch.Tensor:
    """`[n, S, S, 3]`: the point each pixel's depth puts on its ray (docs/behaviour.md#multiview-features).

    z-depths `[n, 1, S, S]` (clamped to `max_depth`), rays `[n, S, S, 2, 3]` (origin, unit direction),
    cam_z `[n, 3]`. `use_distance=False` puts the point at the depth along the ray instead of
    converting z-depth to distance (the reference's "incorrect" variant).
    """
    origin, direction = rays[..., 0, :], rays[..., 1, :]
    depth = depths.clamp(max=max_depth).permute(0, 2, 3, 1)
    if use_distance:
        depth = depth / torch.sum(direction * cam_z[:, None, None], dim=-1, keepdim=True)
    return origin + direction * depth


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


def _maps(x: torch.Tensor) -> torch.Tensor:
    """`[n, S, S, c]` per-pixel vectors -> `[n, 1, c, S, S]` maps (one view per image)."""
    return x.permute(0, 3, 1, 2)[:, None]


def encode_multiview_pcl(batch: MultimodalBatch, embed: MultiviewPointCloudEmbedding, patch_emb: nn.Conv2d,
                         image_size: int, max_depth: float, use_distance: bool = True) -> torch.Tensor:
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
        position = surface_points(depths[s:e], rays[s:e], cam_z[s:e], max_depth, use_distance)
        pixels = embed(views[s:e, None], _maps(rays[s:e, ..., 0, :]), _maps(position), alphas[s:e, None] >= 0.999)
        tokens.append(patch_tokens(pixels[:, 0], patch_emb))
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
