"""Coloured point clouds from meshes: area-weighted surface samples reduced by farthest-point sampling.

This replaces the official 40-view Blender back-projection (docs/behaviour.md#multimodal-batch) with direct surface
sampling; the rest follows the official recipe: `n_candidates` random surface points, farthest-point
sampling (FPS) down to `n_points`, each kept point coloured by the mean colour of the candidates
nearest to it, colours rounded to multiples of 1/255.
"""
import math
from typing import Optional, Tuple

import torch

from shap_e.rendering.color import linear_to_srgb
from shap_e.encoding.assets import AssetMesh

__all__ = ["sample_surface", "farthest_point_sample", "sample_point_cloud"]


def sample_surface(
    mesh: AssetMesh, n_samples: int, generator: Optional[torch.Generator] = None
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uniform samples on the surface (faces picked with probability proportional to area).

    Returns positions `[n, 3]`, face indices `[n]` and barycentrics `[n, 3]`.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    device = mesh.verts.device
    cdf = torch.cumsum(mesh.face_areas().double(), 0)
    if not float(cdf[-1]) > 0:
        raise ValueError("the mesh has zero surface area; pass a mesh with non-degenerate faces")
    draws = torch.rand(3, n_samples, generator=generator, dtype=torch.float64).to(device)
    face = torch.searchsorted(cdf, draws[0] * cdf[-1], right=True).clamp(max=len(cdf) - 1)
    # sqrt warps two uniforms to a uniform point on the triangle.
    root = draws[1].sqrt()
    bary = torch.stack([1 - root, root * (1 - draws[2]), root * draws[2]], dim=1).float()
    positions = (mesh.verts[mesh.faces[face]] * bary[..., None]).sum(dim=1)
    return positions, face, bary


def farthest_point_sample(
    points: torch.Tensor, n_samples: int, generator: Optional[torch.Generator] = None, bucket_size: int = 512
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Farthest-point sampling: each next point is the one farthest from all points chosen so far.

    The first point is `randint(N)` drawn from `generator`. Exact (the same choices as the brute-force
    O(N * n) loop up to ties), but fast: points are grouped into spatially compact buckets of
    `bucket_size` (Morton order), and a new point only updates buckets whose bounding box is closer
    to it than the bucket's largest current distance.

    points: `[N, 3]`. Returns chosen indices `[n_samples]` in selection order and, for every input
    point, the position in that order of its nearest chosen point `[N]` (its Voronoi cell).
    """
    n_points = points.shape[0]
    if points.ndim != 2 or points.shape[1] != 3 or n_points == 0:
        raise ValueError(f"points must be a non-empty [N, 3] tensor, got {tuple(points.shape)}")
    if not 1 <= n_samples <= n_points:
        raise ValueError(f"n_samples must be in [1, {n_points}] (the number of points), got {n_samples}")
    order = _morton_order(points)
    n_buckets = math.ceil(n_points / bucket_size)
    # Pad the last bucket with copies of its last point: a copy changes no distance.
    order = torch.cat([order, order[-1:].expand(n_buckets * bucket_size - n_points)])
    grid = points[order].float().view(n_buckets, bucket_size, 3)
    lo, hi = grid.amin(dim=1), grid.amax(dim=1)
    min_dist = torch.full((n_buckets, bucket_size), math.inf, device=points.device)
    owner = torch.zeros((n_buckets, bucket_size), dtype=torch.int64, device=points.device)
    # Largest squared distance per bucket, inflated so rounding never skips a bucket that holds a
    # point to update (the scaling keeps the argmax).
    bucket_max = torch.full((n_buckets,), math.inf, device=points.device)
    chosen = torch.empty(n_samples, dtype=torch.int64)
    current = int(torch.randint(n_points, (1,), generator=generator))
    for k in range(n_samples):
        chosen[k] = current
        centre = points[current].float()
        gap = centre - torch.maximum(torch.minimum(centre, hi), lo)  # to the nearest point of each box
        near = ((gap * gap).sum(dim=1) <= bucket_max).nonzero().squeeze(1)
        dist = (grid.index_select(0, near) - centre).square_().sum(dim=-1)
        old = min_dist.index_select(0, near)
        closer = dist < old
        new = torch.where(closer, dist, old)
        min_dist.index_copy_(0, near, new)
        owner.index_copy_(0, near, torch.where(closer, k, owner.index_select(0, near)))
        bucket_max.index_copy_(0, near, new.amax(dim=1).mul_(1 + 1e-5))
        bucket = int(bucket_max.argmax())
        current = int(order[bucket * bucket_size + int(min_dist[bucket].argmax())])
    cell = torch.empty(n_points, dtype=torch.int64, device=points.device)
    cell[order] = owner.view(-1)
    return chosen.to(points.device), cell


def _morton_order(points: torch.Tensor) -> torch.Tensor:
    """A permutation `[N]` sorting points along a Z-order curve (10 bits per axis)."""
    lo, hi = points.amin(dim=0), points.amax(dim=0)
    q = ((points - lo) / (hi - lo).clamp(min=1e-12) * 1023).round().long()
    code = torch.zeros(points.shape[0], dtype=torch.int64, device=points.device)
    for bit in range(10):
        for axis in range(3):
            code |= ((q[:, axis] >> bit) & 1) << (3 * bit + axis)
    return torch.argsort(code, stable=True)


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
