"""Official path `shap_e.rendering.mc`: an adapter over `shap_e.rendering.marching_cubes` (the one
marching-cubes implementation) and `shap_e.rendering.mc_table` (the reference triangle table)."""
from dataclasses import dataclass

import torch

from shap_e.rendering import marching_cubes as _mc
from shap_e.rendering.mc_table import triangle_table
from shap_e.rendering.torch_mesh import TorchMesh

__all__ = ["McLookupTable", "marching_cubes"]


@dataclass
class McLookupTable:
    """The triangle table: `cases [256, 5, 3]` int64 cube-edge indices per case (corner bit
    `dx + 2 dy + 4 dz` set when that corner is inside) and `masks [256, 5]` bool (valid triangles)."""

    cases: torch.Tensor
    masks: torch.Tensor

    @classmethod
    def reference(cls, device: torch.device = None) -> "McLookupTable":
        """The reference's table on `device`."""
        return cls(*triangle_table(device))


def marching_cubes(field: torch.Tensor, min_point: torch.Tensor, size: torch.Tensor) -> TorchMesh:
    """The surface `field == 0` of `field [X, Y, Z]` (positive inside) as a `TorchMesh`.

    Sample (i, j, k) lies at `min_point + (i, j, k) / (X - 1, Y - 1, Z - 1) * size`. Faces, vertices,
    order and winding are the reference's (see `shap_e.rendering.marching_cubes.marching_cubes`).
    """
    return _mc.marching_cubes(field, min_point, size)
