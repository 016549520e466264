"""The official renderer interface: `Renderer` and `RayRenderer`, whose methods take an AttrDict
batch, params and options and return an AttrDict (what `shap_e.models.renderer` exports).

`render_views_from_rays` renders the cameras of a batch with any `render_rays(batch, params,
options)`: one ray per pixel from the camera (`shap_e.models.nn.camera`), consecutive chunks of
`ray_batch_size` rays, outputs reshaped to `[batch, *inner, height, width, channels]`.
"""
import math
from abc import ABC, abstractmethod
from typing import Callable, Dict, List, Optional, Tuple

import torch

from shap_e.models.nn.camera import (
    DifferentiableCamera,
    DifferentiableCameraBatch,
    DifferentiableProjectiveCamera,
    camera_batch,
    get_image_coords,
    projective_camera_frame,
)
from shap_e.models.nn.meta import MetaModule
from shap_e.rendering.cameras import ProjectiveCamera
from shap_e.rendering.nerf import z_depth
from shap_e.util.collections import AttrDict

__all__ = ["Renderer", "RayRenderer", "append_tensor", "get_camera_from_batch", "render_views_from_rays"]

DEFAULT_RAY_BATCH_SIZE = 4096
RenderRays = Callable[[AttrDict, Optional[Dict], Optional[Dict]], AttrDict]


class Renderer(MetaModule, ABC):
    """A module that renders the cameras of a batch: `render_views(batch, params, options) -> AttrDict`.

    A `MetaModule`: `update(params)` completes the given params with the module's own tensors.
    """

    @abstractmethod
    def render_views(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """Render `batch.cameras` (a `DifferentiableCameraBatch`) or `batch.pose` + `batch.camera`."""

    @property
    def device(self) -> torch.device:
        """Where the module's tensors are (CPU for a module without any)."""
        for tensor in list(self.parameters()) + list(self.buffers()):
            return tensor.device
        return torch.device("cpu")


class RayRenderer(Renderer):
    """A renderer defined by `render_rays(batch, params, options)` on `batch.rays [batch, n_rays, 2, 3]`."""

    @abstractmethod
    def render_rays(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """Per-ray outputs `[batch, n_rays, channels]` of the rays `batch.rays` (origin, direction)."""

    def render_views(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        return render_views_from_rays(self.render_rays, batch, params=params, options=options, device=self.device)

    def forward(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """`render_rays` for a batch with `rays`, `render_views` for one with cameras or poses."""
        batch = AttrDict(batch)
        if "rays" in batch:
            extra = [key for key in ("pose", "camera", "cameras", "height", "width") if key in batch]
            if extra:
                raise ValueError(f"a batch with 'rays' renders those rays; drop {extra} or drop 'rays'")
            return self.render_rays(batch, params=params, options=options)
        if "cameras" in batch or "pose" in batch:
            return self.render_views(batch, params=params, options=options)
        raise ValueError("batch needs 'rays', 'cameras' (a DifferentiableCameraBatch) or 'pose' and 'camera'")


def get_camera_from_batch(batch: AttrDict) -> Tuple[DifferentiableCamera, int, Tuple[int, ...]]:
    """The flat camera of a batch, its batch size and inner shape.

    batch: `cameras` (a `DifferentiableCameraBatch`; a typed `ProjectiveCamera` is converted), or
    `pose [batch, *inner, 2, 3]` (position, toward) with a template `camera` giving width, height
    and fields of view. `height` and `width` in the batch resize the camera (same aspect ratio).
    """
    if "cameras" in batch:
        cameras = batch["cameras"]
        if isinstance(cameras, ProjectiveCamera):
            cameras = camera_batch(cameras)
        if not isinstance(cameras, DifferentiableCameraBatch):
            raise TypeError(
                f"batch.cameras must be a DifferentiableCameraBatch (see create_pan_cameras), got {type(cameras).__name__}"
            )
        batch_size, *inner_shape = cameras.shape
        camera = cameras.flat_camera
    elif "pose" in batch and "camera" in batch:
        pose = batch["pose"]
        if not isinstance(pose, torch.Tensor) or pose.ndim < 3 or pose.shape[-2:] != (2, 3):
            raise ValueError(f"batch.pose must be a [batch, ..., 2, 3] tensor of (position, toward), got {pose!r}")
        batch_size, *inner_shape = pose.shape[:-2]
        camera = projective_camera_frame(pose[..., 0, :], pose[..., 1, :], batch["camera"])
    else:
        raise ValueError("batch needs 'cameras' (a DifferentiableCameraBatch) or 'pose' and 'camera'")
    if "height" in batch and "width" in batch:
        camera = camera.resize_image(batch["width"], batch["height"])
    return camera, batch_size, tuple(inner_shape)


def append_tensor(val_list: Optional[List[torch.Tensor]], output: Optional[torch.Tensor]):
    """`val_list + [output]` (a new list; `[output]` when `val_list` is None)."""
    if val_list is None:
        return [output]
    return val_list + [output]


def render_views_from_rays(
    render_rays: RenderRays,
    batch: AttrDict,
    params: Optional[Dict] = None,
    options: Optional[Dict] = None,
    device: torch.device = torch.device("cpu"),
) -> AttrDict:
    """Render every pixel of the batch's cameras with `render_rays`, `ray_batch_size` rays at a time.

    The ray chunk size is `batch.ray_batch_size`, else `batch.inner_batch_size`, else 4096 (the last
    chunk may be shorter). Every tensor output becomes `[batch, *inner, height, width, channels]`;
    `aux_losses` are averaged over the chunks. For projective cameras, `depth` (camera z-depth) is
    added from `distances`.
    """
    batch = AttrDict(batch)
    camera, batch_size, inner_shape = get_camera_from_batch(batch)
    n_views, pixels = math.prod(inner_shape), camera.height * camera.width
    coords = get_image_coords(camera.width, camera.height).to(device)
    coords = coords.unsqueeze(0).expand(batch_size * n_views, *coords.shape)
    rays = camera.camera_rays(coords).reshape(batch_size, n_views * pixels, 2, 3)
    ray_batch_size = int(batch.get("ray_batch_size", batch.get("inner_batch_size", DEFAULT_RAY_BATCH_SIZE)))
    if ray_batch_size < 1:
        raise ValueError(f"batch.ray_batch_size must be positive, got {ray_batch_size}")
    outputs: Dict[str, List[torch.Tensor]] = {}
    aux_losses: Dict[str, List[torch.Tensor]] = {}
    for start in range(0, rays.shape[1], ray_batch_size):
        output = AttrDict(render_rays(AttrDict(rays=rays[:, start:start + ray_batch_size]), params, options))
        for name, loss in output.pop("aux_losses", AttrDict()).items():
            aux_losses[name] = append_tensor(aux_losses.get(name), loss)
        for name, value in output.items():
            outputs[name] = append_tensor(outputs.get(name), value)
    result = AttrDict({name: torch.cat(values, dim=1) for name, values in outputs.items()})
    if isinstance(camera, DifferentiableProjectiveCamera) and "distances" in result:
        result.depth = z_depth(result.distances, rays, camera.z, pixels)
    shape = (batch_size, *inner_shape, camera.height, camera.width)
    result = AttrDict({name: value.reshape(*shape, -1) for name, value in result.items()})
    result.aux_losses = AttrDict({name: sum(losses) / len(losses) for name, losses in aux_losses.items()})
    return result
