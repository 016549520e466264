"""PointNet++ (Qi et al. 2017) helpers and layers (official path, the real home): squared distances,
gathering by index, ball queries, sampling and grouping, set abstraction and feature propagation.
Farthest-point sampling is `shap_e.rendering.point_cloud.farthest_point_sample`, per batch element.

Shapes: `xyz [B, N, 3]` coordinates, `points [B, N, D]` features (the layers take channels-first
`[B, 3, N]`, `[B, D, N]` as the reference).
"""
from time import time
from typing import List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from shap_e.rendering.point_cloud import farthest_point_sample as _fps
from shap_e.util.rng import draw_device

__all__ = [
    "PointNetFeaturePropagation", "PointNetSetAbstraction", "PointNetSetAbstractionMsg", "ball_query",
    "farthest_point_sample", "gather_points", "group_neighbourhoods", "index_points", "pc_normalize",
    "query_ball_point", "sample_and_group", "sample_and_group_all", "square_distance", "timeit",
]


def timeit(tag: str, t: float) -> float:
    """Print the seconds since `t` after `tag` and return the current time."""
    print(f"{tag}: {time() - t}s")
    return time()


def pc_normalize(pc: np.ndarray) -> np.ndarray:
    """Points `[N, 3]` centred on their mean and scaled so that the farthest lies at distance 1."""
    pc = pc - np.mean(pc, axis=0)
    return pc / np.max(np.sqrt(np.sum(pc**2, axis=1)))


def square_distance(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """`[B, N, C]`, `[B, M, C]` -> `[B, N, M]` as `|a|^2 + |b|^2 - 2 a.b` (reference rounding)."""
    dist = -2 * torch.matmul(src, dst.transpose(1, 2))
    dist = dist + torch.sum(src**2, -1)[:, :, None]
    return dist + torch.sum(dst**2, -1)[:, None, :]


def index_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """`points [B, N, C]` gathered by indices `idx [B, ...]` -> `[B, ..., C]`."""
    batch = torch.arange(points.shape[0], device=points.device).view(-1, *([1] * (idx.dim() - 1)))
    return points[batch, idx]


def farthest_point_sample(xyz: torch.Tensor, npoint: int, deterministic: bool = False,
                          generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Indices `[B, npoint]` of farthest-point samples of each cloud `xyz [B, N, 3]`.

    Batch element b starts from point b when `deterministic` (the reference's choice), else from
    one `randint(N, (B,))` draw.
    """
    batch, n_points, _ = xyz.shape
    if deterministic:
        starts = torch.arange(batch)
    else:
        starts = torch.randint(0, n_points, (batch,), generator=generator, device=draw_device(generator, "cpu"))
    return torch.stack([_fps(xyz[b], npoint, start=int(starts[b]))[0] for b in range(batch)])


def query_ball_point(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    """Indices `[B, S, min(nsample, N)]` of the smallest-index points of `xyz [B, N, 3]` within
    `radius` of each centre `new_xyz [B, S, 3]`, ascending; a short list repeats its first index."""
    n_points = xyz.shape[1]
    dist = square_distance(new_xyz, xyz)
    index = torch.arange(n_points, device=xyz.device).expand_as(dist)
    index = index.masked_fill(dist > radius**2, n_points)
    index = torch.topk(index, min(nsample, n_points), dim=-1, largest=False, sorted=True).values
    first = index[..., :1].expand_as(index)
    return torch.where(index == n_points, first, index)


def sample_and_group(npoint, radius, nsample, xyz, points, returnfps=False, deterministic=False,
                     fps_method: str = "fps", generator: Optional[torch.Generator] = None):
    """Centres and their neighbourhoods.

    Centres: `npoint` farthest-point samples (`fps_method` 'fps') or the first `npoint` points
    ('first'). Returns centres `new_xyz [B, npoint, 3]` and `new_points [B, npoint, nsample, 3 + D]`
    (neighbour offsets from the centre, then neighbour features); with `returnfps` also the
    neighbours' coordinates `[B, npoint, nsample, 3]` and the centre indices `[B, npoint]`.
    """
    if fps_method == "fps":
        fps_idx = farthest_point_sample(xyz, npoint, deterministic=deterministic, generator=generator)
    elif fps_method == "first":
        fps_idx = torch.arange(npoint, device=xyz.device)[None].expand(xyz.shape[0], -1)
    else:
        raise ValueError(f"unknown fps_method {fps_method!r}; valid: 'fps', 'first'")
    new_xyz = index_points(xyz, fps_idx)
    idx = query_ball_point(radius, nsample, xyz, new_xyz)
    grouped_xyz = index_points(xyz, idx)
    new_points = grouped_xyz - new_xyz[:, :, None]
    if points is not None:
        new_points = torch.cat([new_points, index_points(points, idx)], dim=-1)
    if returnfps:
        return new_xyz, new_points, grouped_xyz, fps_idx
    return new_xyz, new_points


def sample_and_group_all(xyz: torch.Tensor, points: Optional[torch.Tensor]):
    """One group of every point around the origin: `new_xyz [B, 1, 3]` zeros, `new_points [B, 1, N, 3 + D]`."""
    new_points = xyz[:, None]
    if points is not None:
        new_points = torch.cat([new_points, points[:, None]], dim=-1)
    return xyz.new_zeros(xyz.shape[0], 1, xyz.shape[2]), new_points


def group_neighbourhoods(xyz: torch.Tensor, points: Optional[torch.Tensor], npoint: int, radius: float,
                         nsample: int, group_all: bool, deterministic: bool, fps_method: str = "fps",
                         generator: Optional[torch.Generator] = None):
    """The grouping step of the layers, on channels-first `xyz [B, 3, N]` and `points [B, D, N]`:
    `sample_and_group_all` or `sample_and_group` -> centres `[B, S, 3]`, groups `[B, S, K, 3 + D]`."""
    xyz = xyz.permute(0, 2, 1)
    points = None if points is None else points.permute(0, 2, 1)
    if group_all:
        return sample_and_group_all(xyz, points)
    return sample_and_group(npoint, radius, nsample, xyz, points, deterministic=deterministic,
                            fps_method=fps_method, generator=generator)


def _shared_mlp(conv, norm, in_channel: int, widths: List[int]):
    """1x1 convolutions with batch norm (the PointNet shared MLP)."""
    convs, norms = nn.ModuleList(), nn.ModuleList()
    for width in widths:
        convs.append(conv(in_channel, width, 1))
        norms.append(norm(width))
        in_channel = width
    return convs, norms


def _apply_mlp(h: torch.Tensor, convs, norms) -> torch.Tensor:
    for conv, norm in zip(convs, norms):
        h = F.relu(norm(conv(h)))
    return h


class PointNetSetAbstraction(nn.Module):
    """Set abstraction: `sample_and_group` (or all points), a shared MLP of widths `mlp` on
    `in_channel` (3 + D) inputs, max over each group."""

    def __init__(self, npoint, radius, nsample, in_channel, mlp, group_all):
        super().__init__()
        self.npoint, self.radius, self.nsample, self.group_all = npoint, radius, nsample, group_all
        self.mlp_convs, self.mlp_bns = _shared_mlp(nn.Conv2d, nn.BatchNorm2d, in_channel, mlp)

    def forward(self, xyz: torch.Tensor, points: Optional[torch.Tensor]):
        """`xyz [B, 3, N]`, `points [B, D, N]` -> centres `[B, 3, S]`, features `[B, mlp[-1], S]`."""
        new_xyz, grouped = group_neighbourhoods(xyz, points, self.npoint, self.radius, self.nsample,
                                                self.group_all, deterministic=not self.training)
        h = _apply_mlp(grouped.permute(0, 3, 2, 1), self.mlp_convs, self.mlp_bns)  # [B, C, nsample, S]
        return new_xyz.permute(0, 2, 1), h.max(dim=2).values


class PointNetSetAbstractionMsg(nn.Module):
    """Multi-scale set abstraction: one ball (`radius_list[i]`, `nsample_list[i]`) and shared MLP
    (`mlp_list[i]`, on `in_channel + 3` inputs: features then offsets) per scale, around the same
    farthest-point centres; the scales' features are concatenated."""

    def __init__(self, npoint, radius_list, nsample_list, in_channel, mlp_list):
        super().__init__()
        self.npoint, self.radius_list, self.nsample_list = npoint, radius_list, nsample_list
        self.conv_blocks, self.bn_blocks = nn.ModuleList(), nn.ModuleList()
        for widths in mlp_list:
            convs, norms = _shared_mlp(nn.Conv2d, nn.BatchNorm2d, in_channel + 3, widths)
            self.conv_blocks.append(convs)
            self.bn_blocks.append(norms)

    def forward(self, xyz: torch.Tensor, points: Optional[torch.Tensor]):
        """`xyz [B, 3, N]`, `points [B, D, N]` -> centres `[B, 3, S]`, features `[B, sum of mlp_list[i][-1], S]`."""
        xyz = xyz.permute(0, 2, 1)
        points = None if points is None else points.permute(0, 2, 1)
        new_xyz = index_points(xyz, farthest_point_sample(xyz, self.npoint, deterministic=not self.training))
        features = []
        for radius, nsample, convs, norms in zip(self.radius_list, self.nsample_list, self.conv_blocks, self.bn_blocks):
            idx = query_ball_point(radius, nsample, xyz, new_xyz)
            grouped = index_points(xyz, idx) - new_xyz[:, :, None]
            if points is not None:
                grouped = torch.cat([index_points(points, idx), grouped], dim=-1)
            h = _apply_mlp(grouped.permute(0, 3, 2, 1), convs, norms)
            features.append(h.max(dim=2).values)
        return new_xyz.permute(0, 2, 1), torch.cat(features, dim=1)


class PointNetFeaturePropagation(nn.Module):
    """Feature propagation: features of the sparse points interpolated at the dense points (inverse
    squared-distance weights of the 3 nearest), concatenated after the dense points' own features,
    then a shared MLP of widths `mlp` on `in_channel` inputs."""

    def __init__(self, in_channel, mlp):
        super().__init__()
        self.mlp_convs, self.mlp_bns = _shared_mlp(nn.Conv1d, nn.BatchNorm1d, in_channel, mlp)

    def forward(self, xyz1, xyz2, points1, points2):
        """Dense `xyz1 [B, 3, N]`, sparse `xyz2 [B, 3, S]`, `points1 [B, D1, N]` (or None),
        `points2 [B, D2, S]` -> `[B, mlp[-1], N]`."""
        xyz1, xyz2, points2 = xyz1.permute(0, 2, 1), xyz2.permute(0, 2, 1), points2.permute(0, 2, 1)
        batch, n_dense, _ = xyz1.shape
        if xyz2.shape[1] == 1:
            interpolated = points2.expand(-1, n_dense, -1)
        else:
            dists, idx = square_distance(xyz1, xyz2).sort(dim=-1)
            recip = 1.0 / (dists[:, :, :3] + 1e-8)
            weight = recip / recip.sum(dim=2, keepdim=True)
            interpolated = (index_points(points2, idx[:, :, :3]) * weight[..., None]).sum(dim=2)
        h = interpolated if points1 is None else torch.cat([points1.permute(0, 2, 1), interpolated], dim=-1)
        return _apply_mlp(h.permute(0, 2, 1), self.mlp_convs, self.mlp_bns)


# The names this package used before the official ones.
ball_query = query_ball_point
gather_points = index_points
