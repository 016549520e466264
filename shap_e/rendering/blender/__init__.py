"""Official module path `shap_e.rendering.blender`: the scripts that render assets in Blender.

This package needs no Blender: assets are loaded, sampled and rendered in-process. Importing this
package (or any of its official modules) raises an ImportError that names the replacement.
"""
raise ImportError(
    "shap_e.rendering.blender needs Blender, which this package replaces in-process: build encoder "
    "inputs with shap_e.util.data_util.load_or_create_multimodal_batch (or shap_e.encode(path)) and "
    "render asset views with shap_e.encoding.views.render_multiview"
)
