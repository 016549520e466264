"""Official package path `shap_e.models.nerf`: NeRF fields, ray samplers and renderers (adapters over `shap_e.rendering.nerf`)."""
