"""What renderers ask of a field: the activated heads at query points (`NeRSTFOutput`), and the
callable type of a field (`FieldFn`).

The NeRSTF MLP (`shap_e.models.nerstf.mlp`) produces these; `shap_e.rendering.nerf` and
`shap_e.rendering.stf` consume them, without knowing which model is behind the field.
"""
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

__all__ = ["FieldFn", "NeRSTFOutput"]


@dataclass
class NeRSTFOutput:
    """Activated heads at the queried points; a head that was not requested is None.

    sdf, density_coarse, density_fine: `[batch, n_points, 1]`.
    color_stf, color_coarse, color_fine: `[batch, n_points, 3]` in [0, 1].
    """

    sdf: Optional[torch.Tensor] = None
    density_coarse: Optional[torch.Tensor] = None
    density_fine: Optional[torch.Tensor] = None
    color_stf: Optional[torch.Tensor] = None
    color_coarse: Optional[torch.Tensor] = None
    color_fine: Optional[torch.Tensor] = None


# (position [batch, n_points, 3], direction [batch, n_points, 3] or None, heads) -> field heads.
FieldFn = Callable[[torch.Tensor, Optional[torch.Tensor], Sequence[str]], NeRSTFOutput]
