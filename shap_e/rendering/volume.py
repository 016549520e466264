"""Where along each ray the render volume lies: ray / box, ray / sphere and unbounded ranges
(docs/behaviour.md#render-volume).

Every intersection returns a `RayRange` of shape `[..., 1]`; `shap_e.models.volume` (the official
`Volume` classes) wraps these functions.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

__all__ = ["BoundingBox", "RayRange", "intersect_box", "intersect_sphere", "safe_divide", "unbounded_range"]


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
    """Per-ray entry/exit distances (the official `VolumeRange`).

    t0, t1: `[..., 1]` float; intersected: `[..., 1]` bool. Rays that miss a box or sphere get
    `t0 = 0`, `t1 = 1`.
    """

    t0: torch.Tensor
    t1: torch.Tensor
    intersected: torch.Tensor

    def __post_init__(self) -> None:
        if not self.t0.shape == self.t1.shape == self.intersected.shape:
            raise ValueError(
                f"t0, t1 and intersected must have one shape, got {tuple(self.t0.shape)}, "
                f"{tuple(self.t1.shape)} and {tuple(self.intersected.shape)}"
            )

    def next_t0(self) -> torch.Tensor:
        """Where rays leave this volume (0 for rays that miss it): the `t0_lower` of an enclosing one."""
        return self.t1 * self.intersected.float()

    def extend(self, another: "RayRange") -> "RayRange":
        """The range through this volume followed by `another` (rays hitting either, both or none)."""
        return RayRange(
            t0=torch.where(self.intersected, self.t0, another.t0),
            t1=torch.where(another.intersected, another.t1, self.t1),
            intersected=self.intersected | another.intersected,
        )

    def partition(self, ts: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Intervals around sorted samples `ts [..., n, 1]`: edges at t0, the midpoints and t1.

        Returns lower, upper and delta = upper - lower, each `[..., n, 1]`.
        """
        if ts.shape[:-2] != self.t0.shape[:-1] or ts.shape[-1] != 1:
            raise ValueError(f"ts must be [..., n, 1] over rays {tuple(self.t0.shape[:-1])}, got {tuple(ts.shape)}")
        mids = (ts[..., 1:, :] + ts[..., :-1, :]) * 0.5
        lower = torch.cat([self.t0[..., None, :], mids], dim=-2)
        upper = torch.cat([mids, self.t1[..., None, :]], dim=-2)
        return lower, upper, upper - lower


def safe_divide(a: torch.Tensor, b: torch.Tensor, epsilon: float = 1e-6) -> torch.Tensor:
    """`a / b` with `b` pushed `epsilon` away from zero, keeping its sign (finite slab distances)."""
    return a / torch.where(b < 0, b - epsilon, b + epsilon)


def intersect_box(
    origin: torch.Tensor,
    direction: torch.Tensor,
    box: BoundingBox,
    epsilon: float = 1e-6,
    t0_lower: Optional[torch.Tensor] = None,
) -> RayRange:
    """Slab test of rays `origin, direction [..., 3]` against `box` -> `RayRange` of shape `[..., 1]`.

    Directions are pushed `epsilon` away from zero (`safe_divide`) so axis-parallel rays give
    large finite slab distances instead of infinities or NaNs. `t0_lower [..., 1]` raises t0
    (e.g. to start where an inner volume ends, `RayRange.next_t0`).
    """
    bounds = torch.stack([box.bbox_min, box.bbox_max]).to(origin)  # [2, 3]
    ts = safe_divide(bounds - origin[..., None, :], direction[..., None, :], epsilon)  # [..., 2, 3]
    t0 = ts.min(dim=-2).values.max(dim=-1, keepdim=True).values.clamp(min=box.min_dist)
    t1 = ts.max(dim=-2).values.min(dim=-1, keepdim=True).values
    return _bounded_range(_raise(t0, t0_lower), t1, box.min_t_range)


def intersect_sphere(
    origin: torch.Tensor,
    direction: torch.Tensor,
    center: torch.Tensor,
    radius: float,
    min_dist: float = 0.0,
    min_t_range: float = 1e-3,
    t0_lower: Optional[torch.Tensor] = None,
) -> RayRange:
    """Rays `origin, direction [..., 3]` against the ball `|p - center| <= radius` -> `RayRange [..., 1]`.

    Solves `|o + t d - c|^2 = r^2` for the entry and exit distances; t0 is clamped to `min_dist`
    (a ray starting inside enters at `min_dist`). Directions need not be unit length.
    """
    offset = origin - center.to(origin)
    a = (direction * direction).sum(dim=-1, keepdim=True)
    half_b = (direction * offset).sum(dim=-1, keepdim=True)
    c = (offset * offset).sum(dim=-1, keepdim=True) - radius**2
    disc = half_b * half_b - a * c
    root = disc.clamp(min=0).sqrt()  # a miss (disc < 0) gives t0 >= t1: no range
    t0 = ((-half_b - root) / a).clamp(min=min_dist)
    t1 = (-half_b + root) / a
    return _bounded_range(_raise(t0, t0_lower), t1, min_t_range)


def unbounded_range(
    origin: torch.Tensor,
    max_dist: float,
    min_dist: float = 0.0,
    min_t_range: float = 1e-3,
    t0_lower: Optional[torch.Tensor] = None,
) -> RayRange:
    """`[max(0, t0_lower), that + max_dist]` along every ray, t0 clamped to `min_dist` -> `RayRange [..., 1]`."""
    t0 = _raise(origin.new_zeros(*origin.shape[:-1], 1), t0_lower)
    t1 = t0 + max_dist
    t0 = t0.clamp(min=min_dist)
    return RayRange(t0=t0, t1=t1, intersected=t0 + min_t_range < t1)


def _raise(t0: torch.Tensor, t0_lower: Optional[torch.Tensor]) -> torch.Tensor:
    if t0_lower is None:
        return t0
    if t0_lower.shape != t0.shape:
        raise ValueError(f"t0_lower must have the rays' shape {tuple(t0.shape)}, got {tuple(t0_lower.shape)}")
    return torch.maximum(t0, t0_lower)


def _bounded_range(t0: torch.Tensor, t1: torch.Tensor, min_t_range: float) -> RayRange:
    """Rays whose range is shorter than `min_t_range` miss and get `t0 = 0`, `t1 = 1`."""
    intersected = t0 + min_t_range < t1
    t0 = torch.where(intersected, t0, torch.zeros_like(t0))
    t1 = torch.where(intersected, t1, torch.ones_like(t1))
    return RayRange(t0=t0, t1=t1, intersected=intersected)
