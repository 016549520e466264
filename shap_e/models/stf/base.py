"""Official module path `shap_e.models.stf.base`: the interface of STF field models."""
from abc import ABC, abstractmethod
from typing import Dict, List, Optional

import torch

from shap_e.models.query import Query
from shap_e.util.collections import AttrDict

__all__ = ["Model"]


class Model(ABC):
    """A field evaluated at query points: `forward(query, params, options) -> AttrDict` of
    `[batch, n_points, ...]` tensors (e.g. `signed_distance`, `channels`)."""

    @abstractmethod
    def forward(self, query: Query, params: Optional[Dict[str, torch.Tensor]] = None,
                options: Optional[Dict] = None) -> AttrDict:
        """The field's outputs at `query.position [batch, n_points, 3]`."""

    def forward_batched(
        self,
        query: Query,
        query_batch_size: int = 4096,
        params: Optional[Dict[str, torch.Tensor]] = None,
        options: Optional[Dict] = None,
    ) -> AttrDict:
        """`forward` on `query_batch_size` points at a time (along dim 1), outputs concatenated."""
        if query_batch_size < 1:
            raise ValueError(f"query_batch_size must be positive, got {query_batch_size}")
        n_points = query.position.shape[1]
        if n_points <= query_batch_size:
            return AttrDict(self(query=query, params=params, options=options))
        parts: Dict[str, List[torch.Tensor]] = {}
        for start in range(0, n_points, query_batch_size):
            chunk = query.map_tensors(lambda x, start=start: x[:, start:start + query_batch_size])
            for key, value in AttrDict(self(query=chunk, params=params, options=options)).items():
                parts.setdefault(key, []).append(value)
        return AttrDict({key: torch.cat(values, dim=1) for key, values in parts.items()})
