"""Official entry point `shap_e.util.notebooks`: latents -> images, meshes, GIFs
(docs/behaviour.md#notebook-helpers).

A facade: decoding lives in `shap_e.models.decode`, cameras in `shap_e.rendering.cameras` (the
official `DifferentiableCameraBatch` in `shap_e.models.nn.camera`), GIF/MP4 writing in
`shap_e.util.animation`; `create_pan_cameras` and `gif_widget` are the pieces of their own.
"""
import base64
from typing import Any, Sequence, Union

import torch
from PIL import Image

from shap_e.models.decode import decode_latent_images, decode_latent_mesh, latent_color_fn, turntable
from shap_e.models.nn.camera import DifferentiableCameraBatch, camera_batch
from shap_e.rendering.cameras import create_pan_cameras as typed_pan_cameras
from shap_e.rendering.cameras import turntable_cameras
from shap_e.util.animation import gif_bytes, save_gif, save_mp4

__all__ = [
    "create_pan_cameras",
    "decode_latent_images",
    "decode_latent_mesh",
    "gif_widget",
    "latent_color_fn",
    "save_gif",
    "save_mp4",
    "turntable",
    "turntable_cameras",
]


def create_pan_cameras(size: int, device: Union[str, torch.device, None] = None) -> DifferentiableCameraBatch:
    """The 20 turntable cameras of the notebooks (docs/behaviour.md#cameras): radius 4, elevation
    atan(1/2), fov 0.7, `size` x `size` pixels, batch shape `(1, 20)`; first and last views coincide.

    Returns the official `DifferentiableCameraBatch`; `decode_latent_images` and
    `render_views(AttrDict(cameras=...))` take it (`shap_e.rendering.cameras.create_pan_cameras`
    gives the same cameras typed).
    """
    return camera_batch(typed_pan_cameras(size, device))


def gif_widget(images: Sequence[Image.Image]) -> Any:
    """An `ipywidgets.HTML` showing `images` as an animated GIF (100 ms per frame, looping)."""
    try:
        import ipywidgets
    except ImportError as e:
        raise ImportError("gif_widget needs ipywidgets: pip install ipywidgets (or shap-e[notebooks])") from e
    data = base64.b64encode(gif_bytes(images)).decode("ascii")
    return ipywidgets.HTML(f'<img src="data:image/gif;base64,{data}" />')
