"""Official module path `shap_e.models.renderer`: the renderer interface and the renderer of the
released decoders.

`Renderer`, `RayRenderer`, `get_camera_from_batch`, `render_views_from_rays` and `append_tensor`
live in `shap_e.models.ray_renderer` (the official AttrDict interface); `NeRSTFRenderer` lives in
`shap_e.models.nerstf.renderer`. Both are re-exported here.
"""
from shap_e.models.nerstf.renderer import NeRSTFRenderer, RenderOutput, VoidBackground, build_renderer
from shap_e.models.ray_renderer import (
    RayRenderer,
    Renderer,
    append_tensor,
    get_camera_from_batch,
    render_views_from_rays,
)

__all__ = [
    "NeRSTFRenderer",
    "RayRenderer",
    "RenderOutput",
    "Renderer",
    "VoidBackground",
    "append_tensor",
    "build_renderer",
    "get_camera_from_batch",
    "render_views_from_rays",
]
