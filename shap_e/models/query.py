"""`Query` (official path, the real home): the points at which a field model is evaluated."""
from dataclasses import dataclass
from typing import Callable, Optional

import torch

__all__ = ["Query"]


@dataclass
class Query:
    """Field query points.

    position: `[batch, ..., 3]`; direction: optional `[batch, ..., 3]` view directions; t_min,
    t_max: optional ray-distance bounds of the samples.
    """

    position: torch.Tensor
    direction: Optional[torch.Tensor] = None
    t_min: Optional[torch.Tensor] = None
    t_max: Optional[torch.Tensor] = None

    def copy(self) -> "Query":
        """A new Query holding the same tensors."""
        return Query(position=self.position, direction=self.direction, t_min=self.t_min, t_max=self.t_max)

    def map_tensors(self, f: Callable[[torch.Tensor], torch.Tensor]) -> "Query":
        """A new Query with `f` applied to every tensor that is set."""

        def apply(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if x is None else f(x)

        return Query(position=f(self.position), direction=apply(self.direction),
                     t_min=apply(self.t_min), t_max=apply(self.t_max))
