"""Ray / axis-aligned box intersection: where along each ray the render volume lies
(docs/behaviour.md#render-volume)."""
from dataclasses import dataclass

import torch

__all__ = ["BoundingBox", "RayRange", "intersect_box"]


@dataclass
class BoundingBox:
    """The render volume `[bbox_min, bbox_max]`, `[3]` float32 tensors each (release: -1 .. +1)."""

    bbox_min: torch.Tensor
    bbox_max: torch.Tensor
    min_dist: float = 0.0
    min_t_range: float = 1e-3

    @property
    def size(self) -> torch.Tensor:
        """`[3]` edge lengths."""
        return self.bbox_max - self.bbox_min

    def to(self, device: torch.device) -> "BoundingBox":
        """The same box with its tensors on `device`."""
        return BoundingBox(self.bbox_min.to(device), self.bbox_max.to(device), self.min_dist, self.min_t_range)


@dataclass
class RayRange:
    """Per-ray entry/exit distances; rays that miss the box get `t0 = 0`, `t1 = 1`.

    t0, t1: `[..., 1]` float; intersected: `[..., 1]` bool.
    """

    t0: torch.Tensor
    t1: torch.Tensor
    intersected: torch.Tensor


def intersect_box(origin: torch.Tensor, direction: torch.Tensor, box: BoundingBox, epsilon: float = 1e-6) -> RayRange:
    """Slab test of rays `origin, direction [..., 3]` against `box` -> `RayRange` of shape `[..., 1]`.

    Directions are pushed `epsilon` away from zero (keeping their sign) so axis-parallel rays give
    large finite slab distances instead of infinities or NaNs.
    """
    bounds = torch.stack([box.bbox_min, box.bbox_max]).to(origin)  # [2, 3]
    safe_direction = torch.where(direction < 0, direction - epsilon, direction + epsilon)
    ts = (bounds - origin[..., None, :]) / safe_direction[..., None, :]  # [..., 2, 3]
    t0 = ts.min(dim=-2).values.max(dim=-1, keepdim=True).values.clamp(min=box.min_dist)
    t1 = ts.max(dim=-2).values.min(dim=-1, keepdim=True).values
    intersected = t0 + box.min_t_range < t1
    t0 = torch.where(intersected, t0, torch.zeros_like(t0))
    t1 = torch.where(intersected, t1, torch.ones_like(t1))
    return RayRange(t0=t0, t1=t1, intersected=intersected)
