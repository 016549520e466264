"""Official path `shap_e.rendering.pytorch3d_util` (the official STF renderer's PyTorch3D helpers).

Importing it fails, as the official module does without PyTorch3D (a `ModuleNotFoundError` for
'pytorch3d'): STF views are rendered by the pure-torch rasteriser `shap_e.rendering.rasterize` (the
default) or, when PyTorch3D is installed, by `shap_e.rendering.stf.render_mesh_views(...,
rasterizer="pytorch3d")`; the helpers themselves are not part of this package.
"""
import importlib.util

_REPLACEMENT = (
    "STF views are rendered by the pure-torch rasteriser shap_e.rendering.rasterize, or with PyTorch3D "
    "installed by shap_e.rendering.stf.render_mesh_views(..., rasterizer='pytorch3d')"
)

if importlib.util.find_spec("pytorch3d") is None:
    raise ModuleNotFoundError(f"No module named 'pytorch3d': {_REPLACEMENT}", name="pytorch3d")
raise ImportError(f"shap_e.rendering.pytorch3d_util is not part of this package: {_REPLACEMENT}")
