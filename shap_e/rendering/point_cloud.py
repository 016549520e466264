"""Point clouds: the official `PointCloud` (numpy coordinates and named channels) and the one
farthest-point-sampling implementation of the package (`farthest_point_sample`), which the
encoder's point clouds (`shap_e.encoding.point_cloud`) and PointNet++ grouping
(`shap_e.models.nn.pointnet2_utils`) use too.
"""
import io
import math
import os
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import BinaryIO, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from shap_e.rendering.ply_util import write_ply
from shap_e.rendering.view_data import ViewData
from shap_e.util.atomic import write_atomic

__all__ = ["COLORS", "PointCloud", "farthest_point_sample", "preprocess"]

COLORS = frozenset(["R", "G", "B", "A"])


def preprocess(data: np.ndarray, channel: str) -> np.ndarray:
    """Colour channels ('R', 'G', 'B', 'A') in [0, 1] -> `round(255 x)`; other channels unchanged."""
    if channel in COLORS:
        return np.round(data * 255.0)
    return data


def farthest_point_sample(
    points: torch.Tensor,
    n_samples: int,
    generator: Optional[torch.Generator] = None,
    bucket_size: int = 512,
    start: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Farthest-point sampling: each next point is the one farthest from all points chosen so far.

    The first point is `start`, else `randint(N)` drawn from `generator`. A chosen point is never
    chosen again (duplicates of it may be). Exact (the same choices as the brute-force O(N * n)
    loop up to ties), but fast: points are grouped into spatially compact buckets of `bucket_size`
    (Morton order), and a new point only updates buckets whose bounding box is closer to it than
    the bucket's largest current distance. Float inputs are computed in their dtype.

    points: `[N, 3]`. Returns chosen indices `[n_samples]` in selection order and, for every input
    point, the position in that order of its nearest chosen point `[N]` (its Voronoi cell).
    """
    n_points = points.shape[0]
    if points.ndim != 2 or points.shape[1] != 3 or n_points == 0:
        raise ValueError(f"points must be a non-empty [N, 3] tensor, got {tuple(points.shape)}")
    if not 1 <= n_samples <= n_points:
        raise ValueError(f"n_samples must be in [1, {n_points}] (the number of points), got {n_samples}")
    if start is not None and not 0 <= start < n_points:
        raise ValueError(f"start must be a point index in [0, {n_points}), got {start}")
    dtype = points.dtype if points.is_floating_point() else torch.float32
    order = _morton_order(points)
    n_buckets = math.ceil(n_points / bucket_size)
    # Pad the last bucket with copies of its last point, marked -1 so that they are never chosen.
    order = torch.cat([order, order[-1:].expand(n_buckets * bucket_size - n_points)])
    grid = points[order].to(dtype).view(n_buckets, bucket_size, 3)
    position = torch.empty(n_points, dtype=torch.int64, device=points.device)
    position[order[:n_points]] = torch.arange(n_points, device=points.device)
    lo, hi = grid.amin(dim=1), grid.amax(dim=1)
    min_dist = torch.full((n_buckets * bucket_size,), math.inf, dtype=dtype, device=points.device)
    min_dist[n_points:] = -1
    min_dist = min_dist.view(n_buckets, bucket_size)
    owner = torch.zeros((n_buckets, bucket_size), dtype=torch.int64, device=points.device)
    # Largest squared distance per bucket, inflated so rounding never skips a bucket that holds a
    # point to update (the scaling keeps the argmax).
    bucket_max = torch.full((n_buckets,), math.inf, dtype=dtype, device=points.device)
    chosen = torch.empty(n_samples, dtype=torch.int64)
    current = int(torch.randint(n_points, (1,), generator=generator)) if start is None else int(start)
    for k in range(n_samples):
        chosen[k] = current
        centre = points[current].to(dtype)
        gap = centre - torch.maximum(torch.minimum(centre, hi), lo)  # to the nearest point of each box
        near = ((gap * gap).sum(dim=1) <= bucket_max).nonzero().squeeze(1)
        dist = (grid.index_select(0, near) - centre).square_().sum(dim=-1)
        old = min_dist.index_select(0, near)
        closer = dist < old
        min_dist.index_copy_(0, near, torch.where(closer, dist, old))
        owner.index_copy_(0, near, torch.where(closer, k, owner.index_select(0, near)))
        bucket, slot = divmod(int(position[current]), bucket_size)
        min_dist[bucket, slot] = -1  # chosen: never again, and it owns its own cell
        owner[bucket, slot] = k
        bucket_max.index_copy_(0, near, min_dist.index_select(0, near).amax(dim=1).mul_(1 + 1e-5))
        bucket = int(bucket_max.argmax())
        current = int(order[bucket * bucket_size + int(min_dist[bucket].argmax())])
    cell = torch.empty(n_points, dtype=torch.int64, device=points.device)
    cell[order[:n_points]] = owner.view(-1)[:n_points]
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


@dataclass
class PointCloud:
    """Points on a surface: `coords [N, 3]` and `channels {name: [N]}` ('R', 'G', 'B' in [0, 1], ...)."""

    coords: np.ndarray
    channels: Dict[str, np.ndarray]

    @classmethod
    def from_rgbd(cls, vd: ViewData, num_views: Optional[int] = None) -> "PointCloud":
        """Back-project the views of `vd` (which needs a depth channel 'D'): one point per pixel with
        finite depth (and alpha >= 1 - 1e-5 when there is an 'A' channel), its other channels kept."""
        names = vd.channel_names
        if "D" not in names:
            raise ValueError(f"view data must have a depth channel 'D', got channels {names}")
        depth_index = names.index("D")
        all_coords, all_channels = [], defaultdict(list)
        for i in range(vd.num_views if num_views is None else num_views):
            camera, values = vd.load_view(i, names)
            values = values.reshape(-1, len(names))
            coords = camera.image_coords()
            mask = np.isfinite(values[:, depth_index])
            if "A" in names:
                mask &= values[:, names.index("A")] >= 1 - 1e-5
            coords, values = coords[mask], values[mask]
            rays = camera.camera_rays(coords)
            scale = values[:, depth_index] / np.sum(rays[:, 1] * camera.depth_directions(coords), axis=-1)
            all_coords.append(rays[:, 0] + rays[:, 1] * scale[:, None])
            for j, name in enumerate(names):
                if name != "D":
                    all_channels[name].append(values[:, j])
        if not all_coords:
            return cls(coords=np.zeros([0, 3], dtype=np.float32), channels={})
        return cls(np.concatenate(all_coords), {k: np.concatenate(v) for k, v in all_channels.items()})

    @classmethod
    def load(cls, f: Union[str, os.PathLike, BinaryIO]) -> "PointCloud":
        """A point cloud from a `.npz` (path or binary file object) holding `coords` and one array per channel."""
        with np.load(f) as arrays:
            return cls(coords=arrays["coords"], channels={k: arrays[k] for k in arrays.files if k != "coords"})

    def save(self, f: Union[str, os.PathLike, BinaryIO]) -> None:
        """Write the `.npz` that `load` reads, to a path (atomically) or a binary file object."""
        buffer = io.BytesIO()
        np.savez(buffer, coords=self.coords, **self.channels)
        if hasattr(f, "write"):
            f.write(buffer.getvalue())
        else:
            write_atomic(f, buffer.getvalue())

    def write_ply(self, raw_f: BinaryIO) -> None:
        """A binary PLY of the points, with uint8 colours when 'R', 'G', 'B' are channels."""
        rgb = None
        if all(name in self.channels for name in "RGB"):
            rgb = np.stack([self.channels[name] for name in "RGB"], axis=1)
        write_ply(raw_f, coords=self.coords, rgb=rgb)

    def random_sample(self, num_points: int, **subsample_kwargs) -> "PointCloud":
        """`num_points` distinct random points (numpy's global RNG); self if it has no more points."""
        if len(self.coords) <= num_points:
            return self
        indices = np.random.choice(len(self.coords), size=(num_points,), replace=False)
        return self.subsample(indices, **subsample_kwargs)

    def farthest_point_sample(
        self, num_points: int, init_idx: Optional[int] = None, **subsample_kwargs
    ) -> "PointCloud":
        """`num_points` points by farthest-point sampling from `init_idx` (default: a `random.randrange`
        index); self if it has no more points. `subsample_kwargs` go to `subsample`."""
        if len(self.coords) <= num_points:
            return self
        start = random.randrange(len(self.coords)) if init_idx is None else init_idx
        chosen, _ = farthest_point_sample(torch.from_numpy(np.asarray(self.coords)), num_points, start=start)
        return self.subsample(chosen.numpy(), **subsample_kwargs)

    def subsample(self, indices: np.ndarray, average_neighbors: bool = False) -> "PointCloud":
        """The points at `indices`; with `average_neighbors`, each kept point's channels are the mean
        over the original points nearest to it (its own included)."""
        coords = self.coords[indices]
        if not average_neighbors:
            return PointCloud(coords=coords, channels={k: v[indices] for k, v in self.channels.items()})
        owner = PointCloud(coords=coords, channels={}).nearest_points(self.coords)
        owner[indices] = np.arange(len(indices))  # a kept point owns itself, whatever the rounding
        channels = {}
        for name, values in self.channels.items():
            total = np.zeros_like(values[: len(indices)])
            count = np.zeros_like(values[: len(indices)])
            np.add.at(total, owner, values)
            np.add.at(count, owner, 1)
            channels[name] = total / count
        return PointCloud(coords=coords, channels=channels)

    def select_channels(self, channel_names: List[str]) -> np.ndarray:
        """`[N, len(channel_names)]` of the named channels, colours as `round(255 x)` (`preprocess`)."""
        return np.stack([preprocess(self.channels[name], name) for name in channel_names], axis=-1)

    def nearest_points(self, points: np.ndarray, batch_size: int = 16384) -> np.ndarray:
        """For each of `points [M, 3]`, the index `[M]` of the nearest point of this cloud
        (`|a|^2 + |b|^2 - 2 a.b`, `batch_size` query points at a time)."""
        norms = np.sum(self.coords**2, axis=-1)
        indices = []
        for i in range(0, len(points), batch_size):
            batch = points[i : i + batch_size]
            dists = norms + np.sum(batch**2, axis=-1)[:, None] - 2 * (batch @ self.coords.T)
            indices.append(np.argmin(dists, axis=-1))
        return np.concatenate(indices, axis=0) if indices else np.zeros([0], dtype=np.int64)

    def combine(self, other: "PointCloud") -> "PointCloud":
        """This cloud's points followed by `other`'s; both must have the same channels."""
        if self.channels.keys() != other.channels.keys():
            raise ValueError(
                "cannot combine point clouds with different channels: "
                f"{sorted(self.channels)} vs {sorted(other.channels)}"
            )
        return PointCloud(
            coords=np.concatenate([self.coords, other.coords], axis=0),
            channels={k: np.concatenate([v, other.channels[k]], axis=0) for k, v in self.channels.items()},
        )
