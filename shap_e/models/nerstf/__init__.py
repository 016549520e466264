"""The NeRSTF field (one MLP whose first layers come from a latent) and its renderer, which draws it
as NeRF views or as STF meshes."""
from shap_e.models.nerstf.mlp import HEADS, MetaLinear, NeRSTFMLP, NeRSTFOutput
from shap_e.models.nerstf.renderer import NeRSTFRenderer, RenderOutput, VoidBackground, build_renderer

__all__ = [
    "HEADS",
    "MetaLinear",
    "NeRSTFMLP",
    "NeRSTFOutput",
    "NeRSTFRenderer",
    "RenderOutput",
    "VoidBackground",
    "build_renderer",
]
