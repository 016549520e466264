"""Training data: a procedural, seed-deterministic dataset of coloured, captioned 3D objects."""
from shap_e.data.captions import caption
from shap_e.data.procedural import (
    COLOURS,
    HELDOUT_PAIRS,
    PROPORTIONS,
    SPLITS,
    ProceduralAsset,
    allowed_pairs,
    generate_asset,
    iter_dataset,
    read_captions,
    write_dataset,
)
from shap_e.data.shapes import CATEGORIES, MULTI_PART

__all__ = [
    "CATEGORIES",
    "COLOURS",
    "HELDOUT_PAIRS",
    "MULTI_PART",
    "PROPORTIONS",
    "SPLITS",
    "ProceduralAsset",
    "allowed_pairs",
    "caption",
    "generate_asset",
    "iter_dataset",
    "read_captions",
    "write_dataset",
]
