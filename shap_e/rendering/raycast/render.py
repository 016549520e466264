"""Flat diffuse images of a mesh by ray casting (official path)."""
from typing import Optional, Sequence

import torch

from shap_e.rendering.rasterize import STF_LIGHT_DIRECTION
from shap_e.rendering.raycast.cast import cast_camera
from shap_e.rendering.raycast.types import RayCollisions, TriMesh
from shap_e.rendering.view_data import ProjectiveCamera

__all__ = ["render_diffuse_mesh"]

DEFAULT_GREY = 0.8


def render_diffuse_mesh(
    camera: ProjectiveCamera,
    mesh: TriMesh,
    light_direction: Sequence[float] = STF_LIGHT_DIRECTION,
    diffuse: float = 0.7,
    ambient: float = 0.3,
    ray_batch_size: Optional[int] = None,
    checkpoint: Optional[bool] = None,
) -> torch.Tensor:
    """An `[height, width, 4]` RGBA image of `mesh` seen by `camera`.

    Colour = barycentric vertex colour x `(ambient + diffuse * |n . light_direction|)` (two-sided,
    `light_direction` used as given), in the scale of the vertex colours (grey 0.8 without them);
    alpha is 1 where a pixel's ray hits the mesh, 0 elsewhere (colour 0 there too).
    """
    light = torch.tensor(light_direction, device=mesh.vertices.device, dtype=mesh.vertices.dtype)
    hits = RayCollisions.collect(cast_camera(camera, mesh, ray_batch_size=ray_batch_size, checkpoint=checkpoint))
    colors = mesh.vertex_colors
    if colors is None:
        colors = torch.full_like(mesh.vertices, DEFAULT_GREY)
    if len(mesh.faces) == 0:
        return colors.new_zeros(camera.height, camera.width, colors.shape[-1] + 1)
    corner_colors = colors[mesh.faces[hits.tri_indices]]  # [N, 3 corners, C]
    shade = ambient + diffuse * (hits.normals * light).sum(dim=-1).abs()
    rgb = (corner_colors * hits.barycentric[..., None]).sum(dim=-2) * shade[:, None]
    rgb = torch.where(hits.collides[:, None], rgb, torch.zeros_like(rgb))
    return torch.cat([rgb, hits.collides[:, None].to(rgb.dtype)], dim=-1).view(camera.height, camera.width, -1)
