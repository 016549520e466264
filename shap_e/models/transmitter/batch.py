"""The typed input of the transmitter encoder (a point cloud plus multiview renders of one asset
each), and its conversion from the official `AttrDict` batch: the one place where lists of PIL
images, depth arrays and numpy cameras become tensors (docs/behaviour.md#encoder-batch,
docs/behaviour.md#multiview-features).
"""
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from shap_e.rendering.cameras import ProjectiveCamera

__all__ = [
    "MultimodalBatch", "alphas_to_tensor", "as_multimodal_batch", "camera_vectors", "cameras_to_projective",
    "depths_to_tensor", "normalise_depths", "points_of", "views_to_tensor",
]


@dataclass
class MultimodalBatch:
    """What the encoder reads (docs/behaviour.md#encoder-batch), as tensors.

    points: `[batch, 6, n_points]` rows x, y, z (in [-1, 1]^3), r, g, b (in [0, 1]), in
        farthest-point order (the encoder takes the first `data_ctx` points as centres).
    views: `[batch, n_views, 3, size, size]` colours in [-1, 1].
    depths: `[batch, n_views, 1, size, size]` camera z-depth (inf where nothing was hit).
    view_alphas: `[batch, n_views, 1, size, size]` coverage in [0, 1].
    cameras: the cameras of the views, `shape == (batch, n_views)`.
    """

    points: torch.Tensor
    views: Optional[torch.Tensor] = None
    depths: Optional[torch.Tensor] = None
    view_alphas: Optional[torch.Tensor] = None
    cameras: Optional[ProjectiveCamera] = None

    @property
    def batch_size(self) -> int:
        return self.points.shape[0]

    def to(self, device: torch.device) -> "MultimodalBatch":
        def move(t):
            return None if t is None else t.to(device)

        return replace(
            self,
            points=self.points.to(device),
            views=move(self.views),
            depths=move(self.depths),
            view_alphas=move(self.view_alphas),
            cameras=None if self.cameras is None else self.cameras.to(device),
        )


Nested = Union[torch.Tensor, Sequence[Sequence[Any]]]


def _nested(values: Sequence[Sequence[Any]], name: str) -> int:
    """The number of views of a batch given as one list of views per element."""
    if not values or not all(isinstance(row, Sequence) and len(row) == len(values[0]) for row in values):
        raise ValueError(f"{name} must be a tensor or a list (per batch element) of equally long lists of views")
    return len(values[0])


def _resize_nearest(planes: torch.Tensor, size: int) -> torch.Tensor:
    """`[n, 1, h, w]` -> `[n, 1, size, size]`, nearest neighbour."""
    return F.interpolate(planes, (size, size), mode="nearest")


def views_to_tensor(views: Nested, size: int) -> torch.Tensor:
    """`[batch, n_views, 3, size, size]` in [-1, 1] from PIL images (resized with PIL's default filter,
    then RGB); a tensor is returned as it is."""
    if isinstance(views, torch.Tensor):
        return views
    _nested(views, "views")
    rows = [
        torch.stack([torch.from_numpy(np.array(img.resize((size, size)).convert("RGB"))) for img in row])
        for row in views
    ]
    return (torch.stack(rows).float() / 127.5 - 1).permute(0, 1, 4, 2, 3)


def depths_to_tensor(depths: Nested, size: int, max_depth: float, normalise: bool = False) -> torch.Tensor:
    """`[batch, n_views, 1, size, size]` z-depth clamped to `max_depth` (nearest resize) from `[h, w]`
    float arrays; `normalise` maps `[0, max_depth]` to `[-1, 1]`. A tensor is returned as it is."""
    if isinstance(depths, torch.Tensor):
        return depths
    _nested(depths, "depths")
    rows = []
    for row in depths:
        planes = torch.stack([torch.from_numpy(np.asarray(d, dtype=np.float32)) for d in row])[:, None]
        planes = normalise_depths(planes, max_depth) if normalise else planes.clamp(max=max_depth)
        rows.append(_resize_nearest(planes, size))
    return torch.stack(rows)


def normalise_depths(depths: torch.Tensor, max_depth: float) -> torch.Tensor:
    """z-depths clamped to `max_depth`, mapped from `[0, max_depth]` to `[-1, 1]` (an image channel)."""
    return depths.clamp(max=max_depth) / max_depth * 2 - 1


def alphas_to_tensor(view_alphas: Nested, size: int) -> torch.Tensor:
    """`[batch, n_views, 1, size, size]` coverage in [0, 1] from 8-bit ('L') images (nearest resize);
    a tensor is returned as it is."""
    if isinstance(view_alphas, torch.Tensor):
        return view_alphas
    _nested(view_alphas, "view_alphas")
    rows = [
        _resize_nearest(torch.stack([torch.from_numpy(np.array(img)).float() / 255.0 for img in row])[:, None], size)
        for row in view_alphas
    ]
    return torch.stack(rows)


def cameras_to_projective(cameras: Union[ProjectiveCamera, Sequence[Sequence[Any]]]) -> ProjectiveCamera:
    """One `ProjectiveCamera` of shape `(batch, n_views)` from lists of cameras with numpy `origin, x,
    y, z` (e.g. `shap_e.rendering.view_data.ProjectiveCamera`); the intrinsics (`width, height,
    x_fov, y_fov`) are those of the first camera, as in the reference."""
    if isinstance(cameras, ProjectiveCamera):
        return cameras
    n_views = _nested(cameras, "cameras")
    flat = [cam for row in cameras for cam in row]

    def stack(attr: str) -> torch.Tensor:
        return torch.from_numpy(np.stack([np.asarray(getattr(cam, attr), dtype=np.float32) for cam in flat]))

    first = flat[0]
    return ProjectiveCamera(
        origin=stack("origin"), x=stack("x"), y=stack("y"), z=stack("z"), width=int(first.width),
        height=int(first.height), x_fov=float(first.x_fov), y_fov=float(first.y_fov),
        shape=(len(cameras), n_views),
    )


def camera_vectors(cameras: Union[torch.Tensor, ProjectiveCamera, Sequence[Sequence[Any]]]) -> torch.Tensor:
    """`[batch, n_views, 13]`: each camera's `x, y, z, origin` and `x_fov`; a tensor is returned as it is."""
    if isinstance(cameras, torch.Tensor):
        return cameras
    cams = cameras_to_projective(cameras)
    fov = torch.full((cams.n_cameras, 1), float(cams.x_fov), device=cams.origin.device)
    flat = torch.cat([cams.x, cams.y, cams.z, cams.origin, fov], dim=1).float()
    return flat.view(*cams.shape, 13)


def points_of(batch: Union[MultimodalBatch, Mapping[str, Any]]) -> torch.Tensor:
    """`points [batch, channels, n_points]` of a `MultimodalBatch` or an official batch."""
    points = batch.get("points") if isinstance(batch, Mapping) else getattr(batch, "points", None)
    if not isinstance(points, torch.Tensor) or points.dim() != 3:
        raise ValueError("batch must hold points [batch, channels, n_points] (a MultimodalBatch or an AttrDict with "
                         f"'points'), got {type(batch).__name__}")
    return points


def as_multimodal_batch(batch: Union[MultimodalBatch, Mapping[str, Any]], image_size: int,
                        max_depth: float) -> MultimodalBatch:
    """A `MultimodalBatch` from the official batch (an `AttrDict` with `points` and, for encoders that
    read renders, `views`, `depths`, `view_alphas`, `cameras`); a `MultimodalBatch` passes through."""
    points = points_of(batch)
    if isinstance(batch, MultimodalBatch):
        return batch
    device = points.device

    def optional(key: str, convert):
        value = batch.get(key)
        return None if value is None else convert(value).to(device)

    return MultimodalBatch(
        points=points,
        views=optional("views", lambda v: views_to_tensor(v, image_size)),
        depths=optional("depths", lambda d: depths_to_tensor(d, image_size, max_depth)),
        view_alphas=optional("view_alphas", lambda a: alphas_to_tensor(a, image_size)),
        cameras=optional("cameras", cameras_to_projective),
    )
