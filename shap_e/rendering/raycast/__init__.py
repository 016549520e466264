"""Official path `shap_e.rendering.raycast`: casting rays onto triangle meshes (`cast`), the types it
uses (`types`) and a diffuse renderer built on it (`render`)."""
