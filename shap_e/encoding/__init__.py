"""Assets to latents without Blender: load a 3D file, sample its point cloud and views, encode it,
and optionally refine the latent against signed distances and colours drawn from the asset.

`shap_e.encode(path)` is `shap_e.encoding.encode`.
"""
from shap_e.encoding.encode import REFINE_TARGETS, encode, refine_latent, round_trip

__all__ = ["REFINE_TARGETS", "encode", "refine_latent", "round_trip"]
