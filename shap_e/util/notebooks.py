"""Official entry point `shap_e.util.notebooks`: latents -> images, meshes, GIFs
(docs/behaviour.md#notebook-helpers).

A facade: decoding lives in `shap_e.models.decode`, cameras in `shap_e.rendering.cameras`, GIF/MP4
writing in `shap_e.util.animation`; `gif_widget` is the notebook-only piece.
"""
import base64
from typing import Any, Sequence

from PIL import Image

from shap_e.models.decode import decode_latent_images, decode_latent_mesh, latent_color_fn, turntable
from shap_e.rendering.cameras import create_pan_cameras, turntable_cameras
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


def gif_widget(images: Sequence[Image.Image]) -> Any:
    """An `ipywidgets.HTML` showing `images` as an animated GIF (100 ms per frame, looping)."""
    try:
        import ipywidgets
    except ImportError as e:
        raise ImportError("gif_widget needs ipywidgets: pip install ipywidgets (or shap-e[notebooks])") from e
    data = base64.b64encode(gif_bytes(images)).decode("ascii")
    return ipywidgets.HTML(f'<img src="data:image/gif;base64,{data}" />')
