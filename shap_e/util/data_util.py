"""Official entry point `shap_e.util.data_util`: a facade over `shap_e.encoding.batch`.

`load_or_create_multimodal_batch` builds the encoder's input from a 3D asset file without Blender
(surface-sampled point cloud, views from the torch rasteriser).
"""
from shap_e.encoding.batch import load_or_create_multimodal_batch, load_or_create_multimodal_batches

__all__ = ["load_or_create_multimodal_batch", "load_or_create_multimodal_batches"]
