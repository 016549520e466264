"""Official module path `shap_e.models.nn.camera`: the official camera classes, as thin adapters over
`shap_e.rendering.cameras.ProjectiveCamera`, which holds the one ray implementation.

`DifferentiableProjectiveCamera` keeps the official fields and methods (`camera_rays` takes
`coords [batch, *shape, 2]`); `DifferentiableCameraBatch(shape, flat_camera)` is what
`render_views(AttrDict(cameras=...))` and `create_pan_cameras` pass around. `as_projective` and
`camera_batch` convert between the official batch and the typed cameras.
"""
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch

from shap_e.rendering.cameras import ProjectiveCamera, normalize, orientation, pixel_coords, project_out

__all__ = [
    "DifferentiableCamera",
    "DifferentiableCameraBatch",
    "DifferentiableProjectiveCamera",
    "as_projective",
    "camera_batch",
    "camera_orientation",
    "get_image_coords",
    "normalize",
    "project_out",
    "projective_camera_frame",
]


class DifferentiableCamera(ABC):
    """A camera whose rays are differentiable functions of its tensors (the official interface)."""

    @abstractmethod
    def camera_rays(self, coords: torch.Tensor) -> torch.Tensor:
        """Rays `[batch, *shape, 2, 3]` (origin, unit direction) through `coords [batch, *shape, 2]`."""

    @abstractmethod
    def resize_image(self, width: int, height: int) -> "DifferentiableCamera":
        """The same camera rendering `width` x `height` images."""


@dataclass
class DifferentiableProjectiveCamera(DifferentiableCamera):
    """`N` pinhole cameras: origin, x (image right), y (image down), z (forward), each `[N, 3]`.

    width, height: image size in pixels; x_fov, y_fov: full field of view in radians.
    """

    origin: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor
    width: int
    height: int
    x_fov: float
    y_fov: float

    def __post_init__(self) -> None:
        self.projective()  # checks shapes, sizes and fields of view (ValueError naming the field)

    def projective(self, shape: Optional[Sequence[int]] = None) -> ProjectiveCamera:
        """The same cameras as a typed `ProjectiveCamera` (sharing tensors), batch shape `shape`."""
        return ProjectiveCamera(
            origin=self.origin, x=self.x, y=self.y, z=self.z, width=self.width, height=self.height,
            x_fov=self.x_fov, y_fov=self.y_fov, shape=None if shape is None else tuple(shape),
        )

    def resolution(self) -> torch.Tensor:
        """`[width, height]` as float32."""
        return torch.tensor([self.width, self.height], dtype=torch.float32)

    def fov(self) -> torch.Tensor:
        """`[x_fov, y_fov]` as float32."""
        return torch.tensor([self.x_fov, self.y_fov], dtype=torch.float32)

    def image_coords(self) -> torch.Tensor:
        """Pixel coordinates `[height * width, 2]` as (col, row), int64, row-major."""
        return pixel_coords(self.width, self.height)

    def camera_rays(self, coords: torch.Tensor) -> torch.Tensor:
        """Rays `[N, *shape, 2, 3]` (origin, unit direction) through `coords [N, *shape, 2]` (col, row)."""
        n = self.origin.shape[0]
        if coords.ndim < 2 or coords.shape[0] != n or coords.shape[-1] != 2:
            raise ValueError(f"coords must be [{n}, ..., 2] (one row per camera), got {tuple(coords.shape)}")
        rays = self.projective().camera_rays(coords.reshape(n, -1, 2))
        return rays.view(*coords.shape[:-1], 2, 3)

    def resize_image(self, width: int, height: int) -> "DifferentiableProjectiveCamera":
        """The same cameras at `width` x `height`; the aspect ratio must not change (ValueError)."""
        resized = self.projective().resize_image(width, height)
        return DifferentiableProjectiveCamera(
            origin=resized.origin, x=resized.x, y=resized.y, z=resized.z, width=resized.width,
            height=resized.height, x_fov=resized.x_fov, y_fov=resized.y_fov,
        )


@dataclass
class DifferentiableCameraBatch:
    """Cameras with a batch shape: `flat_camera` holds `prod(shape)` cameras in row-major order.

    `render_views` reads `batch_size, *inner = shape`: `(1, 20)` is 20 views of one latent.
    """

    shape: Tuple[int, ...]
    flat_camera: DifferentiableCamera

    def __post_init__(self) -> None:
        if not isinstance(self.flat_camera, DifferentiableCamera):
            raise TypeError(
                f"flat_camera must be a DifferentiableCamera (e.g. DifferentiableProjectiveCamera), "
                f"got {type(self.flat_camera).__name__}"
            )
        shape = tuple(self.shape)
        if not shape or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
            raise ValueError(f"shape must be a tuple of positive ints such as (1, n_views), got {self.shape!r}")
        origin = getattr(self.flat_camera, "origin", None)
        if isinstance(origin, torch.Tensor) and math.prod(shape) != origin.shape[0]:
            raise ValueError(
                f"shape {shape} holds {math.prod(shape)} cameras but flat_camera has {origin.shape[0]}; "
                "use a shape whose product is the number of cameras"
            )


def as_projective(cameras: Union[DifferentiableCameraBatch, ProjectiveCamera]) -> ProjectiveCamera:
    """Typed cameras (batch shape kept) from an official `DifferentiableCameraBatch` of projective
    cameras; a `ProjectiveCamera` is returned as it is."""
    if isinstance(cameras, ProjectiveCamera):
        return cameras
    if not isinstance(cameras, DifferentiableCameraBatch):
        raise TypeError(
            f"cameras must be a DifferentiableCameraBatch (see create_pan_cameras) or a ProjectiveCamera, "
            f"got {type(cameras).__name__}"
        )
    if not isinstance(cameras.flat_camera, DifferentiableProjectiveCamera):
        raise TypeError(
            f"cameras.flat_camera must be a DifferentiableProjectiveCamera here, got "
            f"{type(cameras.flat_camera).__name__}"
        )
    return cameras.flat_camera.projective(cameras.shape)


def camera_batch(cameras: ProjectiveCamera) -> DifferentiableCameraBatch:
    """The official `DifferentiableCameraBatch` of typed cameras (same tensors, same batch shape)."""
    flat = DifferentiableProjectiveCamera(
        origin=cameras.origin, x=cameras.x, y=cameras.y, z=cameras.z, width=cameras.width,
        height=cameras.height, x_fov=cameras.x_fov, y_fov=cameras.y_fov,
    )
    return DifferentiableCameraBatch(shape=tuple(cameras.shape), flat_camera=flat)


def get_image_coords(width, height) -> torch.Tensor:
    """Pixel coordinates `[height * width, 2]` as (col, row), int64, row-major."""
    return pixel_coords(width, height)


def camera_orientation(toward: torch.Tensor, up: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rows x, y, z `[..., 3, 3]` of the camera frame looking along `toward [..., 3]`.

    up: world up `[..., 3]`, default +Z. See `shap_e.rendering.cameras.orientation`.
    """
    if up is None:
        up = torch.zeros_like(toward)
        up[..., 2] = 1
    return torch.stack(orientation(toward, up), dim=-2)


def projective_camera_frame(
    origin: torch.Tensor,
    toward: torch.Tensor,
    camera_params: Union[DifferentiableProjectiveCamera, ProjectiveCamera, object],
) -> DifferentiableProjectiveCamera:
    """Cameras at `origin [..., 3]` looking along `toward [..., 3]` (world up +Z), flattened to `[N, 3]`.

    camera_params: anything with width, height, x_fov, y_fov (a camera of either kind, or the numpy
    `shap_e.rendering.view_data.ProjectiveCamera`).
    """
    origin, toward = origin.reshape(-1, 3), toward.reshape(-1, 3)
    x, y, z = camera_orientation(toward).unbind(dim=-2)
    return DifferentiableProjectiveCamera(
        origin=origin, x=x, y=y, z=z, width=camera_params.width, height=camera_params.height,
        x_fov=camera_params.x_fov, y_fov=camera_params.y_fov,
    )
