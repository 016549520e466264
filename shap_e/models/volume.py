"""Official path `shap_e.models.volume`: render volumes as modules, adapters over the intersection
functions of `shap_e.rendering.volume` (`VolumeRange` is its `RayRange`).

Every `intersect(origin, direction, t0_lower=None, params=None)` takes rays `[batch, ..., 3]` and
returns a `VolumeRange` of `[batch, ..., 1]` tensors; `t0_lower` raises the entry distance (e.g. to
`inner.intersect(...).next_t0()` for the shell around an inner volume).
"""
from abc import ABC, abstractmethod
from typing import Dict, Optional

import torch

from shap_e.models.nn.meta import MetaModule
from shap_e.models.nn.utils import ArrayType, to_torch
from shap_e.rendering.volume import BoundingBox, RayRange, intersect_box, intersect_sphere, unbounded_range

__all__ = ["BoundingBoxVolume", "SphericalVolume", "UnboundedVolume", "Volume", "VolumeRange"]

VolumeRange = RayRange


class Volume(ABC):
    """A region of space that rays are rendered through."""

    @abstractmethod
    def intersect(
        self,
        origin: torch.Tensor,
        direction: torch.Tensor,
        t0_lower: Optional[torch.Tensor] = None,
        params: Optional[Dict] = None,
        epsilon: float = 1e-6,
    ) -> VolumeRange:
        """The range `[t0, t1]` of each ray `origin + t direction` inside the volume."""


def _check_limits(min_dist: float, min_t_range: float) -> None:
    if min_dist < 0:
        raise ValueError(f"min_dist must be >= 0, got {min_dist}")
    if min_t_range <= 0:
        raise ValueError(f"min_t_range must be > 0, got {min_t_range}")


class BoundingBoxVolume(MetaModule, Volume):
    """The axis-aligned box `[bbox_min, bbox_max]` (docs/behaviour.md#render-volume); rays start at
    least `min_dist` out and ranges shorter than `min_t_range` count as misses."""

    def __init__(self, *, bbox_min: ArrayType, bbox_max: ArrayType, min_dist: float = 0.0,
                 min_t_range: float = 1e-3, device: torch.device = None):
        super().__init__()
        _check_limits(min_dist, min_t_range)
        self.bbox_min = to_torch(bbox_min).to(device)
        self.bbox_max = to_torch(bbox_max).to(device)
        if self.bbox_min.shape != (3,) or self.bbox_max.shape != (3,):
            raise ValueError(f"bbox_min and bbox_max must have 3 entries, got {tuple(self.bbox_min.shape)} "
                             f"and {tuple(self.bbox_max.shape)}")
        self.min_dist, self.min_t_range, self.device = min_dist, min_t_range, device
        self.bbox = torch.stack([self.bbox_min, self.bbox_max])

    def intersect(self, origin, direction, t0_lower=None, params=None, epsilon=1e-6) -> VolumeRange:
        box = BoundingBox(self.bbox_min, self.bbox_max, self.min_dist, self.min_t_range)
        return intersect_box(origin, direction, box, epsilon=epsilon, t0_lower=t0_lower)


class UnboundedVolume(MetaModule, Volume):
    """All of space, rendered up to `max_dist` along each ray (from its start, at least `min_dist`)."""

    def __init__(self, *, max_dist: float, min_dist: float = 0.0, min_t_range: float = 1e-3,
                 device: torch.device = None):
        super().__init__()
        _check_limits(min_dist, min_t_range)
        self.max_dist, self.min_dist, self.min_t_range, self.device = max_dist, min_dist, min_t_range, device

    def intersect(self, origin, direction, t0_lower=None, params=None) -> VolumeRange:
        return unbounded_range(origin, self.max_dist, self.min_dist, self.min_t_range, t0_lower)


class SphericalVolume(MetaModule, Volume):
    """The ball of `radius` around `center` (NeRF++'s inner volume)."""

    def __init__(self, *, radius: float, center: ArrayType = (0.0, 0.0, 0.0), min_dist: float = 0.0,
                 min_t_range: float = 1e-3, device: torch.device = None):
        super().__init__()
        _check_limits(min_dist, min_t_range)
        if radius <= 0:
            raise ValueError(f"radius must be > 0, got {radius}")
        self.radius, self.min_dist, self.min_t_range, self.device = radius, min_dist, min_t_range, device
        self.center = to_torch(center).to(device)

    def intersect(self, origin, direction, t0_lower=None, params=None, epsilon=1e-6) -> VolumeRange:
        return intersect_sphere(origin, direction, self.center, self.radius, self.min_dist, self.min_t_range, t0_lower)
