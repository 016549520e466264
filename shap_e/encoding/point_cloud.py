"""Coloured point clouds from meshes: area-weighted surface samples reduced by farthest-point sampling.

This replaces the official 40-view Blender back-projection (docs/behaviour.md#multimodal-batch) with direct surface
sampling; the rest follows the official recipe: `n_candidates` random surface points, farthest-point
sampling (FPS, `shap_e.rendering.point_cloud.farthest_point_sample`) down to `n_points`, each kept
point coloured by the mean colour of the candidates nearest to it, colours rounded to multiples of 1/255.
"""
from typing import Optional, Tuple, Union

import torch

from shap_e.encoding.assets import AssetMesh
from shap_e.rendering.color import linear_to_srgb
from shap_e.rendering.point_cloud import farthest_point_sample
from shap_e.rendering.torch_mesh import TorchMesh, face_areas

__all__ = ["sample_surface", "farthest_point_sample", "sample_point_cloud"]


def sample_surface(
    mesh: Union[AssetMesh, TorchMesh], n_samples: int, generator: Optional[torch.Generator] = None
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uniform samples on the surface of a mesh with `verts [V, 3]` and `faces [F, 3]` (faces picked with
    probability proportional to area).

    Returns positions `[n, 3]`, face indices `[n]` and barycentrics `[n, 3]`.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    device = mesh.verts.device
    cdf = torch.cumsum(face_areas(mesh.verts, mesh.faces).double(), 0)
    if not float(cdf[-1]) > 0:
        raise ValueError("the mesh has zero surface area; pass a mesh with non-degenerate faces")
    draws = torch.rand(3, n_samples, generator=generator, dtype=torch.float64).to(device)
    face = torch.searchsorted(cdf, draws[0] * cdf[-1], right=True).clamp(max=len(cdf) - 1)
    # sqrt warps two uniforms to a uniform point on the triangle.
    root = draws[1].sqrt()
    bary = torch.stack([1 - root, root * (1 - draws[2]), root * draws[2]], dim=1).float()
    positions = (mesh.verts[mesh.faces[face]] * bary[..., None]).sum(dim=1)
    return positions, face, bary


def sample_point_cloud(
    mesh: AssetMesh,
    n_points: int = 16384,
    generator: Optional[torch.Generator] = None,
    n_candidates: int = 2**19,
) -> torch.Tensor:
    """The encoder's point cloud `[6, n_points]`: rows x, y, z, r, g, b, in farthest-point order.

    xyz are in the mesh's frame ([-1, 1]^3 for `load_asset` meshes); rgb are sRGB in [0, 1], rounded
    to multiples of 1/255, each the mean colour of the candidates nearest to that point.
    """
    if n_candidates < n_points:
        raise ValueError(f"n_candidates ({n_candidates}) must be at least n_points ({n_points})")
    positions, face, bary = sample_surface(mesh, n_candidates, generator)
    colors = mesh.colors_at(face, bary)  # linear
    chosen, cell = farthest_point_sample(positions, n_points, generator)
    total = torch.zeros(n_points, 3, dtype=colors.dtype, device=colors.device).index_add_(0, cell, colors)
    count = torch.bincount(cell, minlength=n_points).clamp(min=1)
    mean = linear_to_srgb((total / count[:, None]).clamp(0, 1))
    rgb = torch.round(mean * 255) / 255
    return torch.cat([positions[chosen], rgb], dim=1).T.contiguous()
