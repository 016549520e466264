"""Official module path `shap_e.models.stf.renderer`: STF rendering (SDF grid -> marching cubes ->
textured mesh -> shaded views) with AttrDict batches and outputs, an adapter over
`shap_e.rendering.stf`, which holds the one implementation.
"""
from typing import List

import torch
import torch.nn.functional as F

from shap_e.rendering.stf import grid_points
from shap_e.rendering.volume import BoundingBox

__all__ = ["cross_entropy_sdf_loss", "slice_fields", "volume_query_points"]


def volume_query_points(volume, grid_size: int) -> torch.Tensor:
    """The `grid_size^3` grid over a bounding-box volume -> points `[G^3, 3]` (x slowest, z fastest).

    volume: anything with `bbox_min` and `bbox_max` `[3]` tensors (`BoundingBoxVolume`, `BoundingBox`).
    """
    box = _box(volume)
    index = torch.arange(grid_size**3, device=box.bbox_min.device)
    return grid_points(index, grid_size, box)


def slice_fields(fields: torch.Tensor, dim: int, start: int, end: int) -> torch.Tensor:
    """`fields [batch, X, Y, Z]` restricted to `start:end` along grid axis `dim` (1, 2 or 3)."""
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be a grid axis (1, 2 or 3), got {dim}")
    index: List[slice] = [slice(None)] * fields.ndim
    index[dim] = slice(start, end)
    return fields[tuple(index)]


def cross_entropy_sdf_loss(fields: torch.Tensor) -> torch.Tensor:
    """The official STF sign-consistency loss of `fields [batch, X, Y, Z]` (a scalar).

    For every grid axis and both neighbour directions: binary cross-entropy (with logits) of each
    sample's neighbour sign `(field > 0)` given `logsigmoid(field)` as the logits (the official
    code applies the sigmoid twice; this is what its `aux_losses.cross_entropy` reports), averaged
    over samples; the six terms are summed.
    """
    logits = F.logsigmoid(fields)
    signs = (fields > 0).float()
    losses = []
    for dim in range(1, 4):
        n = fields.shape[dim]
        for target_start, target_end, pred_start, pred_end in ((0, n - 1, 1, n), (1, n, 0, n - 1)):
            targets = slice_fields(signs, dim, target_start, target_end)
            preds = slice_fields(logits, dim, pred_start, pred_end)
            losses.append(F.binary_cross_entropy_with_logits(preds, targets, reduction="none").flatten(1).mean())
    return torch.stack(losses, dim=-1).sum()


def _box(volume) -> BoundingBox:
    """The typed box of a bounding-box volume (anything with bbox_min/bbox_max; min_dist and
    min_t_range where it has them)."""
    if isinstance(volume, BoundingBox):
        return volume
    if not hasattr(volume, "bbox_min") or not hasattr(volume, "bbox_max"):
        raise TypeError(f"volume must be a BoundingBoxVolume, got {type(volume).__name__}")
    return BoundingBox(
        bbox_min=torch.as_tensor(volume.bbox_min, dtype=torch.float32),
        bbox_max=torch.as_tensor(volume.bbox_max, dtype=torch.float32),
        min_dist=float(getattr(volume, "min_dist", 0.0)),
        min_t_range=float(getattr(volume, "min_t_range", 1e-3)),
    )
