"""Official path `shap_e.rendering.view_data`: numpy cameras and collections of rendered views.

`ProjectiveCamera` here is the official numpy pinhole camera (one camera, `[3]` arrays); its ray
maths is `shap_e.rendering.cameras.ProjectiveCamera` (batched torch), which `to_torch` /
`from_torch` convert to and from.
"""
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Dict, List, Tuple

import numpy as np
import torch

from shap_e.rendering.cameras import ProjectiveCamera as TorchProjectiveCamera

__all__ = ["Camera", "MemoryViewData", "ProjectiveCamera", "ViewData"]


@dataclass
class Camera(ABC):
    """How a camera maps pixels of an image to rays."""

    @abstractmethod
    def image_coords(self) -> np.ndarray:
        """`[height * width, 2]` (x, y) pixel coordinates in row-major order."""

    @abstractmethod
    def camera_rays(self, coords: np.ndarray) -> np.ndarray:
        """`[N, 2, 3]` (origin, unit direction) of the rays through pixel coordinates `coords [N, 2]`."""

    def depth_directions(self, coords: np.ndarray) -> np.ndarray:
        """`[N, 3]` unit directions along which a depth channel is measured (cameras with depth only)."""
        raise NotImplementedError(f"{type(self).__name__} does not define depth directions")

    @abstractmethod
    def center_crop(self) -> "Camera":
        """The same camera cropped to a centred square of the smaller image side."""

    @abstractmethod
    def resize_image(self, width: int, height: int) -> "Camera":
        """The same camera with another image size."""

    @abstractmethod
    def scale_scene(self, factor: float) -> "Camera":
        """The same camera for the scene scaled by `factor`."""


@dataclass
class ProjectiveCamera(Camera):
    """A pinhole camera: rays leave `origin` along `z`, with `x` (image right) and `y` (image down)
    spanning the image plane; `x_fov`, `y_fov` are full fields of view in radians (docs/behaviour.md#cameras)."""

    origin: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    width: int
    height: int
    x_fov: float
    y_fov: float

    def to_torch(self, dtype: torch.dtype = torch.float32) -> TorchProjectiveCamera:
        """This camera as a one-camera batch of `shap_e.rendering.cameras.ProjectiveCamera`."""

        def frame(v: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(v), dtype=dtype).reshape(1, 3)

        return TorchProjectiveCamera(
            origin=frame(self.origin), x=frame(self.x), y=frame(self.y), z=frame(self.z),
            width=self.width, height=self.height, x_fov=self.x_fov, y_fov=self.y_fov,
        )

    @classmethod
    def from_torch(cls, camera: TorchProjectiveCamera, index: int = 0) -> "ProjectiveCamera":
        """Camera `index` of a torch camera batch, as numpy arrays."""

        def frame(v: torch.Tensor) -> np.ndarray:
            return v[index].detach().cpu().numpy()

        return cls(
            origin=frame(camera.origin), x=frame(camera.x), y=frame(camera.y), z=frame(camera.z),
            width=camera.width, height=camera.height, x_fov=camera.x_fov, y_fov=camera.y_fov,
        )

    def image_coords(self) -> np.ndarray:
        """`[height * width, 2]` float32 (col, row) coordinates in row-major pixel order."""
        return self.to_torch().image_coords().numpy().astype(np.float32)

    def camera_rays(self, coords: np.ndarray) -> np.ndarray:
        """`[N, 2, 3]` float64 (origin, unit direction) through pixel coordinates `coords [N, 2]`:
        pixel centres at integer coordinates, image edges at +-tan(fov / 2)."""
        coords = np.asarray(coords)
        if coords.ndim != 2 or coords.shape[1] != 2:
            raise ValueError(f"coords must be [N, 2] pixel coordinates, got shape {coords.shape}")
        rays = self.to_torch(torch.float64).camera_rays(torch.from_numpy(coords))
        return rays[0].numpy()

    def depth_directions(self, coords: np.ndarray) -> np.ndarray:
        """`[N, 3]` copies of the unit view direction `z`: depth is measured along it."""
        z = np.asarray(self.z)
        return np.tile((z / np.linalg.norm(z))[None], [len(coords), 1])

    def resize_image(self, width: int, height: int) -> "ProjectiveCamera":
        """The same camera at another resolution; the aspect ratio must not change."""
        self.to_torch().resize_image(width, height)  # checks the aspect ratio
        return replace(self, width=width, height=height)

    def center_crop(self) -> "ProjectiveCamera":
        """A square image of the smaller side, with the smaller field of view on both axes."""
        size, fov = min(self.width, self.height), min(self.x_fov, self.y_fov)
        return replace(self, width=size, height=size, x_fov=fov, y_fov=fov)

    def scale_scene(self, factor: float) -> "ProjectiveCamera":
        """The camera for the scene scaled by `factor` about the world origin (the origin moves)."""
        return replace(self, origin=np.asarray(self.origin) * factor)


class ViewData(ABC):
    """Rendered views of a scene: per view a camera and an image with named channels
    ('R', 'G', 'B', 'A' alpha, 'D' depth, ...)."""

    @property
    @abstractmethod
    def num_views(self) -> int:
        """The number of views."""

    @property
    @abstractmethod
    def channel_names(self) -> List[str]:
        """The channels every view has."""

    @abstractmethod
    def load_view(self, index: int, channels: List[str]) -> Tuple[Camera, np.ndarray]:
        """View `index`: its camera and the float array `[height, width, len(channels)]` of `channels`."""


class MemoryViewData(ViewData):
    """Views held in memory: `channels {name: [num_views, height, width]}` and one camera per view."""

    def __init__(self, channels: Dict[str, np.ndarray], cameras: List[Camera]):
        wrong = {k: v.shape[0] for k, v in channels.items() if v.shape[0] != len(cameras)}
        if wrong:
            raise ValueError(f"every channel needs one image per camera ({len(cameras)}), got {wrong}")
        self.channels = channels
        self.cameras = cameras

    @property
    def num_views(self) -> int:
        return len(self.cameras)

    @property
    def channel_names(self) -> List[str]:
        return list(self.channels.keys())

    def load_view(self, index: int, channels: List[str]) -> Tuple[Camera, np.ndarray]:
        unknown = [c for c in channels if c not in self.channels]
        if unknown:
            raise ValueError(f"unknown channels {unknown}; this view data has {self.channel_names}")
        return self.cameras[index], np.stack([self.channels[c][index] for c in channels], axis=-1)
