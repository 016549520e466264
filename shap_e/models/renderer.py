"""Official module path `shap_e.models.renderer`: the renderer of the released decoders.

`NeRSTFRenderer` lives in `shap_e.models.nerstf.renderer`; it is re-exported here.
"""
from shap_e.models.nerstf.renderer import NeRSTFRenderer, RenderOutput, VoidBackground, build_renderer

__all__ = ["NeRSTFRenderer", "RenderOutput", "VoidBackground", "build_renderer"]
