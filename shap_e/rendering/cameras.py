"""Pinhole cameras: frames, per-pixel rays and the standard turntable ("pan") cameras (docs/behaviour.md#cameras)."""
import math
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple, Union

import numpy as np
import torch

__all__ = [
    "ProjectiveCamera",
    "create_pan_cameras",
    "look_at",
    "normalize",
    "orientation",
    "pixel_coords",
    "project_out",
    "turntable_cameras",
]

Device = Union[str, torch.device, None]


@dataclass
class ProjectiveCamera:
    """A batch of `N` pinhole cameras sharing one resolution and field of view.

    The camera frame is x = image right, y = image **down**, z = forward (docs/behaviour.md#cameras).
    origin, x, y, z: `[N, 3]` float32 tensors (world space, x/y/z unit length).
    width, height: image size in pixels.
    x_fov, y_fov: full horizontal/vertical field of view in radians, in (0, pi).
    shape: the logical batch shape, `prod(shape) == N` (e.g. `(1, 20)` for pan cameras,
        `(batch, n_views)` for the encoder's multiview cameras). Defaults to `(N,)`.
    """

    origin: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    width: int
    height: int
    x_fov: float
    y_fov: float
    shape: Optional[Tuple[int, ...]] = field(default=None)

    def __post_init__(self) -> None:
        for name in ("origin", "x", "y", "z"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.ndim != 2 or value.shape[-1] != 3:
                raise ValueError(f"{name} must be a [N, 3] tensor, got {_describe(value)}")
        n = self.origin.shape[0]
        for name in ("x", "y", "z"):
            if getattr(self, name).shape[0] != n:
                raise ValueError(
                    f"{name} has {getattr(self, name).shape[0]} rows but origin has {n}; "
                    "pass one frame vector per camera"
                )
        for name in ("width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for name in ("x_fov", "y_fov"):
            value = float(getattr(self, name))
            if not 0.0 < value < math.pi:
                raise ValueError(f"{name} must lie in (0, pi) radians, got {value!r}")
        self.shape = (n,) if self.shape is None else tuple(int(s) for s in self.shape)
        if math.prod(self.shape) != n:
            raise ValueError(f"shape {self.shape} does not hold {n} cameras; use a shape with prod == {n}")

    @property
    def n_cameras(self) -> int:
        return self.origin.shape[0]

    def image_coords(self) -> torch.Tensor:
        """Pixel coordinates `[height * width, 2]` as (col, row), int64, in row-major pixel order."""
        return pixel_coords(self.width, self.height, self.origin.device)

    def camera_rays(self, coords: torch.Tensor) -> torch.Tensor:
        """Rays through pixel coordinates (docs/behaviour.md#cameras).

        coords: `[P, 2]` (same pixels for every camera) or `[N, P, 2]`, (col, row), any numeric dtype;
            pixel centres sit at integer coordinates and the image edges at exactly +-tan(fov/2).
        Returns `[N, P, 2, 3]`: (origin, unit direction) per ray, float32.
        """
        n = self.n_cameras
        if coords.ndim == 2:
            coords = coords.unsqueeze(0).expand(n, -1, -1)
        if coords.ndim != 3 or coords.shape[0] != n or coords.shape[-1] != 2:
            raise ValueError(f"coords must be [P, 2] or [{n}, P, 2], got {tuple(coords.shape)}")
        # The same float32 operations in the same order as the reference: the NeRF positional
        # encoding multiplies positions by 2^14, so even 1-ulp differences become visible downstream.
        device = self.origin.device
        resolution = torch.tensor([self.width, self.height], dtype=torch.float32, device=device)
        fov = torch.tensor([self.x_fov, self.y_fov], dtype=torch.float32, device=device)
        fracs = (coords.float() / (resolution - 1)) * 2 - 1
        fracs = fracs * torch.tan(fov / 2)
        directions = (
            self.z.view(n, 1, 3) + self.x.view(n, 1, 3) * fracs[..., :1] + self.y.view(n, 1, 3) * fracs[..., 1:]
        )
        directions = directions / directions.norm(dim=-1, keepdim=True)
        origins = self.origin.view(n, 1, 3).expand_as(directions)
        return torch.stack([origins, directions], dim=2)

    def rays(self) -> torch.Tensor:
        """Rays for every pixel: `[N, height * width, 2, 3]` in row-major pixel order."""
        return self.camera_rays(self.image_coords())

    def resize_image(self, width: int, height: int) -> "ProjectiveCamera":
        """The same cameras at another resolution; the aspect ratio must not change."""
        if width * self.height != height * self.width:
            raise ValueError(
                f"resize to {width}x{height} changes the aspect ratio of {self.width}x{self.height}; "
                "keep width/height constant"
            )
        return replace(self, width=width, height=height)

    def to(self, device: Device) -> "ProjectiveCamera":
        """The same cameras with their tensors on `device`."""
        return replace(
            self, origin=self.origin.to(device), x=self.x.to(device), y=self.y.to(device), z=self.z.to(device)
        )

    def reshape(self, *shape: int) -> "ProjectiveCamera":
        """The same cameras with another logical batch shape."""
        return replace(self, shape=tuple(shape))


def create_pan_cameras(size: int, device: Device = None) -> ProjectiveCamera:
    """The 20 turntable cameras of the notebooks (docs/behaviour.md#cameras): radius 4, elevation atan(1/2), fov 0.7.

    Both endpoints of theta = linspace(0, 2 pi, 20) are included, so the first and last views coincide.
    Returns cameras with `shape == (1, 20)` and `[20, 3]` float32 frames, `width = height = size`.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    # float64 numpy, as the reference, then one cast to float32.
    theta = np.linspace(0, 2 * np.pi, num=20)
    z = np.stack([np.sin(theta), np.cos(theta), np.full_like(theta, -0.5)], axis=1)
    z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    origin = -z * 4
    x = np.stack([np.cos(theta), -np.sin(theta), np.zeros_like(theta)], axis=1)
    y = np.cross(z, x)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).float().to(device)

    return ProjectiveCamera(
        origin=tensor(origin), x=tensor(x), y=tensor(y), z=tensor(z),
        width=size, height=size, x_fov=0.7, y_fov=0.7, shape=(1, 20),
    )


def look_at(
    origins: torch.Tensor,
    targets: torch.Tensor,
    width: int,
    height: int,
    fov: float,
    up: Tuple[float, float, float] = (0.0, 0.0, 1.0),
) -> ProjectiveCamera:
    """Cameras at `origins [N, 3]` looking at `targets [N, 3]` (docs/behaviour.md#cameras).

    The frame is `orientation(targets - origins, up)`; `fov` is used for both axes. World up
    defaults to +Z.
    """
    if origins.shape != targets.shape or origins.ndim != 2 or origins.shape[-1] != 3:
        raise ValueError(
            f"origins and targets must both be [N, 3], got {tuple(origins.shape)} and {tuple(targets.shape)}"
        )
    origins = origins.float()
    up_t = torch.tensor(up, dtype=torch.float32, device=origins.device).expand_as(origins)
    x, y, z = orientation(targets.float() - origins, up_t)
    return ProjectiveCamera(
        origin=origins, x=x, y=y, z=z, width=width, height=height, x_fov=fov, y_fov=fov
    )


def pixel_coords(width: int, height: int, device: Device = None) -> torch.Tensor:
    """Pixel coordinates `[height * width, 2]` as (col, row), int64, in row-major pixel order."""
    index = torch.arange(height * width, device=device)
    return torch.stack([index % width, torch.div(index, width, rounding_mode="floor")], dim=1)


def normalize(vec: torch.Tensor) -> torch.Tensor:
    """`vec [..., D]` scaled to unit length along the last axis."""
    return vec / torch.linalg.norm(vec, dim=-1, keepdim=True)


def project_out(vec1: torch.Tensor, vec2: torch.Tensor) -> torch.Tensor:
    """`vec1 [..., D]` without its component along `vec2 [..., D]` (which need not be unit length)."""
    vec2 = normalize(vec2)
    return vec1 - (vec1 * vec2).sum(dim=-1, keepdim=True) * vec2


def orientation(toward: torch.Tensor, up: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The camera frame looking along `toward [..., 3]` with world `up [..., 3]` (docs/behaviour.md#cameras).

    z = toward / |toward| (forward); y = -normalize(up without its part along z) (image down);
    x = y cross z (image right). Returns x, y, z, each `[..., 3]`. A zero `toward`, or one parallel
    to `up`, has no frame: ValueError.
    """
    if toward.shape != up.shape or toward.shape[-1:] != (3,):
        raise ValueError(f"toward and up must both be [..., 3], got {tuple(toward.shape)} and {tuple(up.shape)}")
    if bool((torch.linalg.norm(toward, dim=-1) == 0).any()):
        raise ValueError("every view direction (toward, or target - origin) must be non-zero")
    z = normalize(toward)
    y = project_out(up, toward)
    if bool((torch.linalg.norm(y, dim=-1) < 1e-6).any()):
        raise ValueError("a view direction is parallel to `up`; pass another `up` vector")
    y = -normalize(y)
    return torch.cross(y, z, dim=-1), y, z


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def turntable_cameras(size: int, n_views: int = 20, device: Device = None) -> ProjectiveCamera:
    """`n_views` cameras evenly around +Z (no repeated frame), otherwise like `create_pan_cameras`.

    Radius 4, elevation atan(1/2), fov 0.7 rad, `shape == (1, n_views)`.
    """
    if isinstance(n_views, bool) or not isinstance(n_views, int) or n_views < 1:
        raise ValueError(f"n_views must be a positive int, got {n_views!r}")
    theta = np.linspace(0, 2 * np.pi, num=n_views, endpoint=False)
    z = np.stack([np.sin(theta), np.cos(theta), np.full_like(theta, -0.5)], axis=1)
    z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    x = np.stack([np.cos(theta), -np.sin(theta), np.zeros_like(theta)], axis=1)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).float().to(device)

    return ProjectiveCamera(
        origin=tensor(-4 * z), x=tensor(x), y=tensor(np.cross(z, x)), z=tensor(z),
        width=size, height=size, x_fov=0.7, y_fov=0.7, shape=(1, n_views),
    )
