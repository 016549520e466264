"""Narrow-band SDF grid evaluation: the exact field only near the surface (the fast mesh mode).

Marching cubes reads the field only through (a) which samples are inside (`value > 0`) and
(b) the values at both ends of edges whose ends disagree. So the mesh of a grid is unchanged if
the samples of every cube that straddles the surface hold their exact values and every other
sample only has the right sign. This module evaluates:

1. a coarse grid (every `coarse_step`-th sample per axis, plus the last one);
2. the fine samples of every coarse cell that may contain surface: its corners disagree, or their
   smallest |value| is within `margin` x (the largest corner-to-corner change along a coarse edge
   in the 3x3x3 cells around it) of zero; then `dilation` more coarse cells around those;
3. until no straddling cube has a sample that was not evaluated (checked on the padded grid,
   whose -1 border is exact): the coarse cells holding such samples are evaluated too. This
   tracks any surface that touches the band to its end, however far it runs.

Unevaluated samples are set to +1 or -1 after the corners of their coarse cell. When step 2 selects
more than `max_fraction` of the grid (noise-like fields), the band is given up (None): evaluating
the whole grid in order is then cheaper than the band's bookkeeping.

Guarantee: the mesh is identical to the exact grid's (same vertices bit for bit, same faces,
because evaluated samples go through the same per-point computation) unless some surface lies
wholly inside coarse cells left out by step 2 and touches no evaluated sample. A sufficient
condition: within `dilation` cells of the band, the field's slope never exceeds
`2 margin / sqrt(3)` (about 2.3 with the default margin) times the steepest change seen along a
nearby coarse edge, so no left-out cell can reach zero from its corners. Smooth SDFs satisfy this;
noise fields select nearly every cell, and the band is given up (see above).
"""
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["BandStats", "coarse_indices", "evaluate_band"]

# (flat fine indices [n] int64) -> exact field values [batch, n] on those samples.
SampleFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class BandStats:
    """How much of the grid the narrow band evaluated (coarse samples included)."""

    evaluated: int
    total: int
    rounds: int


def coarse_indices(grid_size: int, step: int, device=None) -> torch.Tensor:
    """Coarse sample positions along one axis: `0, step, 2 step, ...` and always `grid_size - 1`."""
    index = list(range(0, grid_size, step))
    if index[-1] != grid_size - 1:
        index.append(grid_size - 1)
    return torch.tensor(index, dtype=torch.int64, device=device)


def evaluate_band(
    sample: SampleFn,
    batch_size: int,
    grid_size: int,
    device,
    coarse_step: int = 4,
    margin: float = 2.0,
    dilation: int = 0,
    max_fraction: float = 0.5,
) -> Tuple[Optional[torch.Tensor], BandStats]:
    """The `[batch, G, G, G]` grid with exact values near the surface and +-1 elsewhere (see module doc).

    sample: evaluates the field at flat grid indices (x slowest, z fastest).
    Returns None instead of the grid if the band would exceed `max_fraction` of the samples.
    """
    if coarse_step < 2 or margin < 0 or dilation < 0:
        raise ValueError(f"need coarse_step >= 2, margin >= 0, dilation >= 0; got {coarse_step}, {margin}, {dilation}")
    g = grid_size
    axis = coarse_indices(g, coarse_step, device)
    flat = ((axis[:, None, None] * g + axis[None, :, None]) * g + axis[None, None, :]).reshape(-1)
    coarse = sample(flat).view(batch_size, len(axis), len(axis), len(axis))
    values = torch.empty(batch_size, g, g, g, device=device)
    known = torch.zeros(g, g, g, dtype=torch.bool, device=device)
    values.view(batch_size, -1)[:, flat] = coarse.view(batch_size, -1)
    known.view(-1)[flat] = True
    active = _dilate(_candidate_cells(coarse, margin), dilation)
    # Each fine sample's coarse cell (lower) and, on a cell boundary, the cell below it (upper).
    lower = (torch.searchsorted(axis, torch.arange(g, device=device), right=True) - 1).clamp(max=len(axis) - 2)
    upper = torch.where((axis[lower] == torch.arange(g, device=device)) & (lower > 0), lower - 1, lower)
    signs = torch.where(coarse > 0, 1.0, -1.0)[:, lower][:, :, lower][:, :, :, lower]
    rounds = 0
    while True:
        rounds += 1
        needed = _cell_samples(active, lower, upper) & ~known
        if rounds == 1 and int(needed.sum()) > max_fraction * g**3:
            return None, BandStats(evaluated=len(flat), total=g**3, rounds=0)
        index = needed.view(-1).nonzero().squeeze(1)
        if len(index):
            values.view(batch_size, -1)[:, index] = sample(index)
            known |= needed
        filled = torch.where(known, values, signs)
        missing = _straddling_unknown(filled, known)
        if missing is None:
            return filled, BandStats(evaluated=int(known.sum()), total=g**3, rounds=rounds)
        active[lower[missing[:, 0]], lower[missing[:, 1]], lower[missing[:, 2]]] = True
        active[upper[missing[:, 0]], upper[missing[:, 1]], upper[missing[:, 2]]] = True


def _candidate_cells(coarse: torch.Tensor, margin: float) -> torch.Tensor:
    """Coarse cells `[K-1]^3` (any batch element) whose corners disagree or lie within the margin of 0."""
    corners = _corners(coarse)  # [batch, 8, K-1, K-1, K-1]
    inside = corners > 0
    straddles = inside.any(dim=1) & ~inside.all(dim=1)
    change = torch.stack([(a - b).abs() for a, b in _edges(corners)], dim=1).amax(dim=1)
    change = F.max_pool3d(change[:, None], kernel_size=3, stride=1, padding=1)[:, 0]
    near = corners.abs().amin(dim=1) <= margin * change
    return (straddles | near).any(dim=0)


def _corners(grid: torch.Tensor) -> torch.Tensor:
    """The 8 corner values `[batch, 8, X-1, Y-1, Z-1]` of every cube of `grid [batch, X, Y, Z]`."""
    return torch.stack(
        [grid[:, dx:grid.shape[1] - 1 + dx, dy:grid.shape[2] - 1 + dy, dz:grid.shape[3] - 1 + dz]
         for dx in (0, 1) for dy in (0, 1) for dz in (0, 1)],
        dim=1,
    )


def _edges(corners: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """The 12 cube edges as pairs of corner value tensors (corner bit 4 = x, 2 = y, 1 = z)."""
    return [(corners[:, a], corners[:, a | bit]) for bit in (1, 2, 4) for a in range(8) if not a & bit]


def _dilate(cells: torch.Tensor, dilation: int) -> torch.Tensor:
    if dilation == 0:
        return cells.clone()
    grown = F.max_pool3d(cells[None, None].float(), kernel_size=2 * dilation + 1, stride=1, padding=dilation)
    return grown[0, 0] > 0


def _cell_samples(active: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Fine samples `[G, G, G]` that lie in (the closed extent of) an active coarse cell."""
    needed = None
    for ix in (lower, upper):
        for iy in (lower, upper):
            for iz in (lower, upper):
                part = active[ix[:, None, None], iy[None, :, None], iz[None, None, :]]
                needed = part if needed is None else needed | part
    return needed


def _straddling_unknown(filled: torch.Tensor, known: torch.Tensor):
    """Fine indices `[n, 3]` of unevaluated corners of cubes that straddle the surface, or None.

    Checked on the grid padded with its exact -1 border, as the mesh will be extracted.
    """
    padded = F.pad(filled, (1, 1, 1, 1, 1, 1), value=-1.0)
    inside = _corners(padded > 0)
    straddles = (inside.any(dim=1) & ~inside.all(dim=1)).any(dim=0)  # [G+1]^3 cubes
    unknown = F.pad(~known, (1, 1, 1, 1, 1, 1), value=False)
    corner_unknown = _corners(unknown[None])[0]  # [8, G+1, G+1, G+1]
    bad = straddles[None] & corner_unknown
    if not bool(bad.any()):
        return None
    corner, cx, cy, cz = bad.nonzero().unbind(1)
    # Corner c of padded cube (x, y, z) is padded sample (x + dx, ...), i.e. fine sample minus 1.
    points = torch.stack([cx + (corner >> 2) - 1, cy + ((corner >> 1) & 1) - 1, cz + (corner & 1) - 1], dim=1)
    return torch.unique(points, dim=0)
