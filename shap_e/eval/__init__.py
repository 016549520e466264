"""Evaluation: geometry/colour metrics, a ground-truth classifier, and evaluation runs of the models."""
from shap_e.eval.classify import ShapeClassifier, build_classifier, canonical_grid, color_name, dominant_color
from shap_e.eval.metrics import EvalMesh, chamfer_and_color, occupancy, to_eval_mesh, volumetric_iou
from shap_e.eval.run import (
    LabelledPrompt,
    asset_mesh,
    evaluate_ground_truth,
    evaluate_image_to_3d,
    evaluate_reconstruction,
    evaluate_text_to_3d,
    heldout_prompts,
    picture,
    write_results,
)

__all__ = [
    "EvalMesh",
    "LabelledPrompt",
    "ShapeClassifier",
    "asset_mesh",
    "build_classifier",
    "canonical_grid",
    "chamfer_and_color",
    "color_name",
    "dominant_color",
    "evaluate_ground_truth",
    "evaluate_image_to_3d",
    "evaluate_reconstruction",
    "evaluate_text_to_3d",
    "heldout_prompts",
    "occupancy",
    "picture",
    "to_eval_mesh",
    "volumetric_iou",
    "write_results",
]
