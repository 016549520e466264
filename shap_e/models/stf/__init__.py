"""Official package path `shap_e.models.stf`: STF fields and their renderer (adapters over `shap_e.rendering.stf`)."""
