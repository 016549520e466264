"""Evaluation: geometry/colour metrics, a ground-truth classifier, evaluation runs of the models on fixed
validation and test draws, and the 95 % intervals of their numbers (see docs/evaluation.md)."""
from shap_e.eval.classify import ShapeClassifier, build_classifier, canonical_grid, color_name, dominant_color
from shap_e.eval.intervals import bootstrap_mean_interval, wilson_interval
from shap_e.eval.judge import asset_mesh
from shap_e.eval.metrics import chamfer_and_color, occupancy, to_eval_mesh, volumetric_iou
from shap_e.eval.report import markdown_report, write_results
from shap_e.eval.run import (
    LabelledPrompt,
    evaluate_ground_truth,
    evaluate_image_to_3d,
    evaluate_reconstruction,
    evaluate_text_to_3d,
    heldout_prompts,
    picture,
)
from shap_e.eval.sets import DRAW_SIZE, EVAL_SETS, EvalSet, evaluate_draws
from shap_e.eval.settings import EvalSettings, Judges

__all__ = [
    "DRAW_SIZE",
    "EVAL_SETS",
    "EvalSet",
    "EvalSettings",
    "Judges",
    "LabelledPrompt",
    "ShapeClassifier",
    "asset_mesh",
    "bootstrap_mean_interval",
    "build_classifier",
    "canonical_grid",
    "chamfer_and_color",
    "color_name",
    "dominant_color",
    "evaluate_draws",
    "evaluate_ground_truth",
    "evaluate_image_to_3d",
    "evaluate_reconstruction",
    "evaluate_text_to_3d",
    "heldout_prompts",
    "markdown_report",
    "occupancy",
    "picture",
    "to_eval_mesh",
    "volumetric_iou",
    "wilson_interval",
    "write_results",
]
