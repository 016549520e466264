"""Judge a generated mesh by the procedural dataset's own labels: its category and its colour name.

* Category: nearest reference shape by IoU of canonical occupancy grids. A mesh is made canonical
  by turning it about +Z so that its footprint's minimum-area bounding rectangle is axis-aligned
  (datasets made with `random_yaw` turn objects about +Z), then stretching its bounding box onto [-1, 1]^3 on
  every axis (so tall, flat, wide and small variants of a category look alike). The 8 symmetries of
  the square footprint left by the alignment are tried and the best IoU kept. References are
  train-split shapes of every category and proportion.
* Colour: every face votes for the palette colour nearest to its own (CIELAB distance of sRGB
  colours), weighted by its area times `(1 + |n_z|) / 2`; the colour with the largest weight wins.
  A vote is robust to the mixed colours of multi-part objects and to noisy decoded colours, where a
  mean colour is not. Horizontal faces count double because the parts named first in captions
  (table tops, seats, caps, shades) are the horizontal ones, while the second colour goes to thin
  vertical legs and stems that can outweigh a tall table's top in bare area (3 of 1500 assets).

Before the category is judged, connected parts with under 1 % of the surface area are dropped: a
stray speck would otherwise stretch the bounding box. The smallest part of any dataset object (a
table leg) holds 3.4 % of its area.
"""
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from shap_e.eval.metrics import face_colored_mesh, is_empty, occupancy, to_eval_mesh
from shap_e.rendering.color import linear_to_srgb, srgb_to_linear
from shap_e.rendering.torch_mesh import TorchMesh

__all__ = [
    "ShapeClassifier",
    "build_classifier",
    "canonical_grid",
    "color_name",
    "connected_parts",
    "dominant_color",
    "drop_small_parts",
    "srgb_to_lab",
    "yaw_align",
]

_N_YAW = 90  # candidate footprint angles in [0, pi/2): 1 degree apart
MIN_PART_FRACTION = 0.01


def srgb_to_lab(srgb: torch.Tensor) -> torch.Tensor:
    """CIELAB (D65) of sRGB colours `[..., 3]` in [0, 1] -> `[..., 3]` (L in [0, 100])."""
    linear = srgb_to_linear(srgb)
    to_xyz = torch.tensor(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]], dtype=linear.dtype
    )
    xyz = linear @ to_xyz.T / torch.tensor([0.95047, 1.0, 1.08883], dtype=linear.dtype)
    eps = (6 / 29) ** 3
    f = torch.where(xyz > eps, xyz.clamp(min=eps) ** (1 / 3), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return torch.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def _palette() -> Tuple[List[str], torch.Tensor]:
    from shap_e.data import COLOURS

    names = list(COLOURS)
    return names, srgb_to_lab(torch.tensor([COLOURS[n] for n in names], dtype=torch.float32) / 255)


def color_name(srgb: torch.Tensor) -> List[str]:
    """Nearest palette colour name (`shap_e.data.COLOURS`) of each sRGB colour `[N, 3]` in [0, 1]."""
    if srgb.ndim != 2 or srgb.shape[1] != 3:
        raise ValueError(f"srgb must be [N, 3] colours in [0, 1], got shape {tuple(srgb.shape)}")
    names, lab = _palette()
    index = torch.cdist(srgb_to_lab(srgb.float().clamp(0, 1)), lab).argmin(dim=1)
    return [names[i] for i in index.tolist()]


def dominant_color(mesh: Any) -> Tuple[Optional[str], float]:
    """The palette colour with the largest vote (see the module docstring) and its share of the votes.

    Returns (None, 0.0) for an empty or uncoloured mesh. Colours are linear on the mesh, named in sRGB.
    """
    mesh = to_eval_mesh(mesh)
    colors = mesh.face_colors()
    if is_empty(mesh) or colors is None:
        return None, 0.0
    names, lab = _palette()
    votes = torch.cdist(srgb_to_lab(linear_to_srgb(colors.float().clamp(0, 1))), lab).argmin(dim=1)
    tri = mesh.verts[mesh.faces].double()
    normal = torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1)  # length: twice the area
    weight = (normal.norm(dim=-1) + normal[:, 2].abs()) / 4  # area * (1 + |n_z|) / 2
    total = torch.zeros(len(names), dtype=torch.float64).index_add_(0, votes, weight)
    if not float(total.sum()) > 0:
        return None, 0.0
    best = int(total.argmax())
    return names[best], float(total[best] / total.sum())


def connected_parts(faces: torch.Tensor, n_verts: int) -> torch.Tensor:
    """Part label `[F]` of each face: faces sharing a vertex, directly or through others, share a label."""
    label = torch.arange(n_verts)
    a, b = faces.reshape(-1), faces.roll(1, dims=1).reshape(-1)  # the three edges of every face
    while True:
        low = torch.minimum(label[a], label[b])
        new = label.scatter_reduce(0, a, low, "amin").scatter_reduce(0, b, low, "amin")
        new = new[new]  # pointer jumping: labels point to smaller vertices of the same part
        if torch.equal(new, label):
            return label[faces[:, 0]]
        label = new


def drop_small_parts(mesh: TorchMesh, min_fraction: float = MIN_PART_FRACTION) -> TorchMesh:
    """The mesh (in the evaluation's form, `to_eval_mesh`) without the connected parts holding less than
    `min_fraction` of its surface area."""
    if is_empty(mesh):
        return mesh
    part = connected_parts(mesh.faces, mesh.verts.shape[0])
    areas = mesh.face_areas().double()
    part_area = torch.zeros(mesh.verts.shape[0], dtype=torch.float64).index_add_(0, part, areas)
    keep = part_area[part] >= min_fraction * areas.sum()
    colors = mesh.face_colors()
    return face_colored_mesh(mesh.verts, mesh.faces[keep], None if colors is None else colors[keep])


def yaw_align(verts: torch.Tensor) -> torch.Tensor:
    """Turn `verts [V, 3]` about +Z so that the minimum-area rectangle around the footprint is axis-aligned."""
    xy = verts[:, :2].double()
    angles = torch.arange(_N_YAW, dtype=torch.float64) * (math.pi / 2 / _N_YAW)
    axes = torch.stack([angles.cos(), angles.sin()], dim=1)  # [A, 2]; the other axis is the normal
    u = xy @ axes.T  # [V, A]
    v = xy @ torch.stack([-axes[:, 1], axes[:, 0]], dim=1).T
    area = (u.amax(0) - u.amin(0)) * (v.amax(0) - v.amin(0))
    # Near-ties (round footprints) resolve to the smallest angle, deterministically.
    angle = float(angles[int((area <= area.min() * (1 + 1e-6) + 1e-12).nonzero()[0])])
    cos, sin = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[cos, sin, 0.0], [-sin, cos, 0.0], [0.0, 0.0, 1.0]], dtype=verts.dtype)
    return verts @ rot.T


def canonical_grid(mesh: Any, resolution: int = 32) -> torch.Tensor:
    """Occupancy `[R, R, R]` of the yaw-aligned mesh, small parts dropped, with its bounding box
    stretched onto [-1, 1]^3."""
    mesh = drop_small_parts(to_eval_mesh(mesh))
    if is_empty(mesh):
        return torch.zeros(resolution, resolution, resolution, dtype=torch.bool)
    # Unreferenced vertices must not move the footprint or the bounding box.
    used, faces = torch.unique(mesh.faces, return_inverse=True)
    verts = yaw_align(mesh.verts[used].float())
    lo, hi = verts.amin(dim=0), verts.amax(dim=0)
    scaled = (verts - (lo + hi) / 2) * (2 / (hi - lo).clamp(min=1e-6))
    return occupancy(TorchMesh(scaled, faces), resolution)


def _symmetries(grid: torch.Tensor) -> torch.Tensor:
    """The 8 images `[8, R, R, R]` of a grid under the symmetries of the square in the (x, y) plane."""
    turns = [grid, grid.transpose(0, 1)]
    out = []
    for g in turns:
        out += [g, g.flip(0), g.flip(1), g.flip(0).flip(1)]
    return torch.stack(out)


@dataclass
class ShapeClassifier:
    """Nearest-reference category classifier.

    grids: `[N, R^3]` float32 0/1 canonical occupancy of the references; labels: `N` category names.
    """

    resolution: int
    grids: torch.Tensor
    labels: List[str]

    def scores(self, mesh: Any) -> Dict[str, float]:
        """Best IoU with any reference of each category."""
        query = _symmetries(canonical_grid(mesh, self.resolution)).reshape(8, -1).float()
        inter = query @ self.grids.T  # [8, N]
        union = query.sum(1, keepdim=True) + self.grids.sum(1) - inter
        iou = (inter / union.clamp(min=1)).amax(dim=0)
        best: Dict[str, float] = {}
        for label, value in zip(self.labels, iou.tolist()):
            best[label] = max(best.get(label, 0.0), value)
        return best

    def classify(self, mesh: Any) -> Tuple[str, float]:
        """The category of the most similar reference and that IoU (in [0, 1])."""
        scores = self.scores(mesh)
        label = max(scores, key=scores.get)
        return label, scores[label]


def build_classifier(
    per_proportion: int = 2,
    resolution: int = 32,
    seed: int = 0,
    categories: Optional[Sequence[str]] = None,
    transmitter: Optional[torch.nn.Module] = None,
    grid_size: int = 64,
    vertex_placement: str = "reference",
) -> ShapeClassifier:
    """References: `per_proportion` train-split shapes of every (category, proportion).

    Geometry depends on (category, proportion, seed) only; each reference gets a colour its category
    is trained with, and seeds `seed * 1000 + k` (disjoint from `iter_dataset`'s 31-bit draws in practice).

    transmitter: also add each reference as this transmitter reconstructs it (its encoder's latent,
        decoded by marching cubes on a `grid_size` grid with `vertex_placement`), so that a decoded
        mesh is compared with decoded references too. A decoder rounds edges: a tall box it decodes
        is nearer a sharp cylinder than a sharp box, although it is still nearest its own kind decoded.
        A decoder that blurred every category alike would make the decoded references alike, so they
        cannot make a blurry model score better than chance.
    """
    from shap_e.data import CATEGORIES, PROPORTIONS, allowed_pairs, generate_asset

    if per_proportion < 1:
        raise ValueError(f"per_proportion must be at least 1, got {per_proportion}")
    categories = list(categories) if categories is not None else list(CATEGORIES)
    colour_of = {}
    for category, colour in allowed_pairs("train"):
        colour_of.setdefault(category, colour)
    grids, labels = [], []
    for category in categories:
        if category not in colour_of:
            raise ValueError(f"unknown category {category!r}; valid: {list(CATEGORIES)}")
        for proportion in PROPORTIONS:
            for k in range(per_proportion):
                asset = generate_asset(category, colour_of[category], proportion, seed * 1000 + k)
                meshes = [asset.mesh]
                if transmitter is not None:
                    meshes.append(_reconstruct(asset.mesh, transmitter, grid_size, vertex_placement, seed * 1000 + k))
                grids += [canonical_grid(mesh, resolution).reshape(-1) for mesh in meshes]
                labels += [category] * len(meshes)
    return ShapeClassifier(resolution, torch.stack(grids).float(), labels)


def _reconstruct(mesh: Any, transmitter: torch.nn.Module, grid_size: int, vertex_placement: str, seed: int) -> Any:
    """`mesh` encoded by `transmitter` (encoder alone) and decoded to a `TorchMesh`."""
    from shap_e.encoding import round_trip

    with tempfile.TemporaryDirectory(prefix="shap_e_reference_") as tmp:
        path = os.path.join(tmp, "reference.ply")
        mesh.export(path, file_type="ply")
        return round_trip(path, transmitter, grid_size, vertex_placement, seed)
