"""Official path `shap_e.models.nn.utils`: small tensor helpers. `sample_pmf` and `safe_divide` are
the renderer's own (`shap_e.rendering.nerf`, `shap_e.rendering.volume`)."""
from typing import Iterable, Union

import numpy as np
import torch

from shap_e.rendering.nerf import sample_pmf
from shap_e.rendering.volume import safe_divide

__all__ = ["ArrayType", "safe_divide", "sample_pmf", "to_torch"]

ArrayType = Union[np.ndarray, Iterable[int], torch.Tensor]


def to_torch(arr: ArrayType, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor as it is, or an array / sequence converted to a `dtype` tensor."""
    if isinstance(arr, torch.Tensor):
        return arr
    return torch.from_numpy(np.array(arr)).to(dtype)
