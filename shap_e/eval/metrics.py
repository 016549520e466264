"""Geometry and colour metrics between two meshes in Shap-E's [-1, 1]^3 frame.

* Volumetric IoU: occupancy of the `R^3` cell centres of [-1, 1]^3. One ray per grid column is cast
  along an axis and the signed crossings beyond each cell are summed (a winding number along the
  ray: +1 through a face whose outward normal points along the ray, -1 against it). Overlapping
  closed parts (a snowman's balls) count as one solid. Rays along x, y and z vote, so a mesh left
  open on one side (cut by the box of a decoded field) is still filled. Cost ~ surface area in cells.
* Chamfer distance: the mean of the two directional mean nearest-neighbour distances between
  area-weighted surface samples (so two concentric spheres of radii r and s give |r - s|).
* Colour error: mean absolute sRGB difference (in [0, 1]) between each surface sample and the
  nearest sample of the other mesh, averaged over both directions.
"""
from typing import Any, Dict, Optional, Tuple

import torch

from shap_e.rendering.color import linear_to_srgb, srgb_to_linear
from shap_e.rendering.torch_mesh import TorchMesh

__all__ = [
    "chamfer_and_color",
    "face_colored_mesh",
    "grid_iou",
    "is_empty",
    "nearest",
    "occupancy",
    "to_eval_mesh",
    "volumetric_iou",
]

# Sub-cell shift of the ray columns: keeps rays off the edges and vertices of axis-aligned meshes,
# where a crossing would be counted twice or not at all. Far below any grid resolution used.
_COLUMN_SHIFT = (3.1e-6, 1.7e-6)


def is_empty(mesh: TorchMesh) -> bool:
    """True when the mesh has no face with area (an empty or degenerate marching-cubes result)."""
    return mesh.faces.shape[0] == 0 or bool(mesh.face_areas().sum() == 0)


def face_colored_mesh(verts: torch.Tensor, faces: torch.Tensor, colors: Optional[torch.Tensor] = None) -> TorchMesh:
    """The evaluation's mesh: `verts [V, 3]`, `faces [F, 3]` and linear `colors [F, 3]` (or None for an
    uncoloured mesh) as a `TorchMesh` with face channels 'R', 'G', 'B'."""
    channels = {} if colors is None else {k: colors[:, i] for i, k in enumerate("RGB")}
    return TorchMesh(verts, faces, face_channels=channels)


def to_eval_mesh(mesh: Any) -> TorchMesh:
    """The evaluation's form of a mesh: a CPU `TorchMesh` with float32 `verts [V, 3]`, int64 `faces [F, 3]`
    and linear colours in its face channels 'R', 'G', 'B' (none for an uncoloured mesh).

    Takes a `TorchMesh` (linear R, G, B vertex channels, averaged over each face's corners, else
    face channels), a `trimesh.Trimesh` (sRGB vertex or face colours) or an `AssetMesh` (linear corner
    colours; textures are ignored).
    """
    if hasattr(mesh, "corner_colors"):  # AssetMesh
        return face_colored_mesh(mesh.verts.float(), mesh.faces.long(), mesh.corner_colors.float().mean(dim=1))
    if isinstance(mesh, TorchMesh):
        return _from_torch_mesh(mesh)
    if hasattr(mesh, "vertices") and hasattr(mesh, "faces"):  # trimesh.Trimesh
        return _from_trimesh(mesh)
    raise ValueError(f"mesh must be a TorchMesh, trimesh.Trimesh or AssetMesh, got {type(mesh).__name__}")


def _from_torch_mesh(mesh: TorchMesh) -> TorchMesh:
    verts, faces = mesh.verts.detach().float().cpu(), mesh.faces.detach().long().cpu()
    channels = mesh.vertex_channels or {}
    if all(k in channels for k in "RGB"):
        rgb = torch.stack([channels[k].detach().float().cpu() for k in "RGB"], dim=-1)
        return face_colored_mesh(verts, faces, rgb[faces].mean(dim=1) if len(faces) else torch.zeros(0, 3))
    colors = mesh.face_colors()
    return face_colored_mesh(verts, faces, None if colors is None else colors.detach().float().cpu())


def _from_trimesh(mesh: Any) -> TorchMesh:
    verts = torch.tensor(mesh.vertices, dtype=torch.float32)
    faces = torch.tensor(mesh.faces, dtype=torch.int64)
    visual, colors = getattr(mesh, "visual", None), None
    kind = getattr(visual, "kind", None)
    if kind == "vertex":
        srgb = torch.tensor(visual.vertex_colors[:, :3], dtype=torch.float32) / 255
        colors = srgb_to_linear(srgb)[faces].mean(dim=1)
    elif kind == "face":
        colors = srgb_to_linear(torch.tensor(visual.face_colors[:, :3], dtype=torch.float32) / 255)
    return face_colored_mesh(verts, faces, colors)


def occupancy(mesh: TorchMesh, resolution: int = 64, max_pairs: int = 1 << 21) -> torch.Tensor:
    """Inside/outside of the cell centres of an `R^3` grid over [-1, 1]^3 -> bool `[R, R, R]` ([x, y, z]).

    The mesh should be outward-wound; a cell is inside when rays along at least two of the three
    axes say so. An empty mesh gives an empty grid. Memory is bounded by `max_pairs` (triangle, ray)
    pairs at a time.
    """
    if resolution < 2:
        raise ValueError(f"resolution must be at least 2, got {resolution}")
    tri = mesh.verts.detach().cpu().double()[mesh.faces.cpu()]  # [F, 3, 3]
    # Cyclic axis permutations keep the winding (outward stays outward); the ray runs along the last.
    along_z = _ray_occupancy(tri, resolution, max_pairs)
    along_x = _ray_occupancy(tri[..., [1, 2, 0]], resolution, max_pairs).permute(2, 0, 1)
    along_y = _ray_occupancy(tri[..., [2, 0, 1]], resolution, max_pairs).permute(1, 2, 0)
    return (along_x.int() + along_y.int() + along_z.int()) >= 2


def _ray_occupancy(tri: torch.Tensor, res: int, max_pairs: int) -> torch.Tensor:
    """Occupancy `[R, R, R]` from rays along +z through triangles `tri [F, 3, 3]` (float64)."""
    step = 2.0 / res
    # delta[i, j, m]: net crossings whose height lies between cell centres m - 1 and m.
    delta = torch.zeros(res, res, res + 1, dtype=torch.int32)
    if len(tri):
        first = [-1 + step / 2 + s * step for s in _COLUMN_SHIFT]
        lo = ((tri[..., :2].amin(dim=1) - torch.tensor(first, dtype=torch.float64)) / step).ceil().clamp(0, res)
        hi = ((tri[..., :2].amax(dim=1) - torch.tensor(first, dtype=torch.float64)) / step).floor().clamp(-1, res - 1)
        extent = (hi - lo + 1).clamp(min=0).long()  # [F, 2] columns spanned along x and y
        counts = extent[:, 0] * extent[:, 1]
        for chunk in _chunks(counts, max_pairs):
            _add_crossings(delta, tri[chunk], lo[chunk].long(), extent[chunk], first, step)
    # Winding number at cell k: the crossings above it, i.e. delta summed over m > k.
    above = delta.flip(-1).cumsum(-1).flip(-1)[..., 1:]
    return above > 0


def _chunks(counts: torch.Tensor, max_pairs: int):
    """Index slices of consecutive triangles whose pair counts add up to at most `max_pairs`."""
    keep = (counts > 0).nonzero().squeeze(1)
    total = counts[keep].cumsum(0)
    start = 0
    while start < len(keep):
        base = int(total[start - 1]) if start else 0
        end = max(int(torch.searchsorted(total, base + max_pairs, right=True)), start + 1)
        yield keep[start:end]
        start = end


def _add_crossings(delta, tri, lo, extent, first, step) -> None:
    """Accumulate the signed crossings of triangles `tri [T, 3, 3]` with their candidate columns."""
    res = delta.shape[0]
    counts = extent[:, 0] * extent[:, 1]
    owner = torch.repeat_interleave(torch.arange(len(tri)), counts)  # [P]
    local = torch.arange(len(owner)) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
    i = lo[owner, 0] + local // extent[owner, 1]
    j = lo[owner, 1] + local % extent[owner, 1]
    px, py = first[0] + i.double() * step, first[1] + j.double() * step
    a, b, c = tri[owner, 0], tri[owner, 1], tri[owner, 2]
    # 2D edge functions: barycentric weights of the column in the projected triangle.
    area = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    wa = (c[:, 0] - b[:, 0]) * (py - b[:, 1]) - (c[:, 1] - b[:, 1]) * (px - b[:, 0])
    wb = (a[:, 0] - c[:, 0]) * (py - c[:, 1]) - (a[:, 1] - c[:, 1]) * (px - c[:, 0])
    wc = area - wa - wb
    sign = area.sign()
    hit = (area != 0) & (wa * sign >= 0) & (wb * sign >= 0) & (wc * sign >= 0)
    z = (wa * a[:, 2] + wb * b[:, 2] + wc * c[:, 2])[hit] / area[hit]
    # Number of cell centres strictly below the crossing.
    m = ((z + 1) / step - 0.5).ceil().clamp(0, res).long()
    delta.index_put_((i[hit], j[hit], m), sign[hit].int(), accumulate=True)


def grid_iou(a: torch.Tensor, b: torch.Tensor) -> float:
    """Intersection over union of two bool grids of the same shape (1.0 when both are empty)."""
    if a.shape != b.shape:
        raise ValueError(f"grids must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def volumetric_iou(pred: Any, ref: Any, resolution: int = 64) -> float:
    """Volumetric IoU of two meshes (anything `to_eval_mesh` takes) on an `R^3` grid over [-1, 1]^3."""
    return grid_iou(occupancy(to_eval_mesh(pred), resolution), occupancy(to_eval_mesh(ref), resolution))


def nearest(points: torch.Tensor, others: torch.Tensor, chunk: int = 4096) -> Tuple[torch.Tensor, torch.Tensor]:
    """Distance `[P]` and index `[P]` of the nearest of `others [Q, 3]` (Q >= 1) for each of `points [P, 3]`."""
    if len(others) == 0:
        raise ValueError("others is empty; pass at least one point to search")
    index = [torch.cdist(points[s:s + chunk], others).argmin(dim=1) for s in range(0, len(points), chunk)]
    index = torch.cat(index) if index else torch.zeros(0, dtype=torch.int64)
    # cdist's fast matrix-product path loses ~1e-5 to cancellation; recompute the chosen distances.
    return (points - others[index]).norm(dim=-1), index


def _surface_samples(mesh: TorchMesh, n: int, generator: torch.Generator):
    from shap_e.encoding.point_cloud import sample_surface

    points, face, _ = sample_surface(mesh, n, generator)
    face_colors = mesh.face_colors()
    colors = None if face_colors is None else linear_to_srgb(face_colors[face].clamp(0, 1))
    return points.float(), colors


def chamfer_and_color(pred: Any, ref: Any, n_samples: int = 10000, seed: int = 0) -> Dict[str, Optional[float]]:
    """Chamfer distance and colour error between two meshes from `n_samples` surface samples each.

    Both meshes are sampled with the same seed, so a mesh compared with itself scores exactly 0.
    Returns `{"chamfer": float, "color_error": float or None}`; both are None when a mesh is empty,
    `color_error` is None when a mesh has no colours.
    """
    pred, ref = to_eval_mesh(pred), to_eval_mesh(ref)
    if is_empty(pred) or is_empty(ref):
        return {"chamfer": None, "color_error": None}
    p_points, p_colors = _surface_samples(pred, n_samples, torch.Generator().manual_seed(seed))
    r_points, r_colors = _surface_samples(ref, n_samples, torch.Generator().manual_seed(seed))
    d_pr, k_pr = nearest(p_points, r_points)
    d_rp, k_rp = nearest(r_points, p_points)
    chamfer = 0.5 * (float(d_pr.mean()) + float(d_rp.mean()))
    color_error = None
    if p_colors is not None and r_colors is not None:
        err_p = (p_colors - r_colors[k_pr]).abs().mean()
        err_r = (r_colors - p_colors[k_rp]).abs().mean()
        color_error = 0.5 * (float(err_p) + float(err_r))
    return {"chamfer": chamfer, "color_error": color_error}
