"""Judging one mesh against the labels of the object it should be: category (by `Judges`) and colour.

Every mesh lives in the [-1, 1]^3 frame of decoded meshes: assets are normalised as `load_asset`
does (bounding-box centre at the origin, largest extent 2).
"""
from typing import Any, Dict, Mapping, Optional

from shap_e.eval.classify import ShapeClassifier, dominant_color
from shap_e.eval.metrics import face_colored_mesh, is_empty, to_eval_mesh
from shap_e.eval.settings import Judges
from shap_e.rendering.torch_mesh import TorchMesh

__all__ = ["asset_mesh", "extra_categories", "judge_mesh", "predicted_category"]


def asset_mesh(asset: Any) -> TorchMesh:
    """A `ProceduralAsset` (or trimesh) in the evaluation's form (`to_eval_mesh`) normalised to [-1, 1]^3
    like `load_asset`."""
    mesh = to_eval_mesh(getattr(asset, "mesh", asset))
    used = mesh.verts[mesh.faces.unique()]
    lo, hi = used.amin(dim=0), used.amax(dim=0)
    verts = (mesh.verts - (lo + hi) / 2) * (2 / float((hi - lo).max()))
    return face_colored_mesh(verts, mesh.faces, mesh.face_colors())


def predicted_category(mesh: TorchMesh, classifier: ShapeClassifier) -> Optional[str]:
    """The classifier's category of the mesh; None for an empty mesh."""
    return classifier.classify(mesh)[0] if not is_empty(mesh) else None


def extra_categories(mesh: TorchMesh, category: str, extra: Mapping[str, ShapeClassifier]) -> Dict[str, Any]:
    """`pred_category_<name>` and `category_correct_<name>` of the mesh by each named extra judge."""
    row: Dict[str, Any] = {}
    for name, classifier in extra.items():
        predicted = predicted_category(mesh, classifier)
        row[f"pred_category_{name}"] = predicted
        row[f"category_correct_{name}"] = predicted == category
    return row


def judge_mesh(mesh: Any, category: str, colour: str, judges: Judges) -> Dict[str, Any]:
    """Category (with the main judge's best reference IoU as `category_score`) and colour of one mesh
    against its labels; `judges.main` must be built."""
    mesh = to_eval_mesh(mesh)
    predicted, score = judges.main.classify(mesh) if not is_empty(mesh) else (None, 0.0)
    name, share = dominant_color(mesh)
    return dict(
        category=category, colour=colour, pred_category=predicted, category_score=round(score, 4),
        pred_colour=name, colour_share=round(share, 4), category_correct=predicted == category,
        colour_correct=name == colour, n_faces=int(mesh.faces.shape[0]),
        **extra_categories(mesh, category, judges.extra),
    )
