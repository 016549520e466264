"""Typed results of one reverse-process evaluation, readable as the official code's dicts too."""
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Iterator, Optional

import torch

__all__ = ["MeanVariance", "SampleStep"]


class _FieldMapping(Mapping):
    """Field access by key (`out["pred_xstart"]`), iteration over field names, `copy()`, item
    assignment to a field: what code written against the official dict results does with them."""

    # Identity equality, as a plain dataclass without eq: comparing tensors has no single truth value.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._names():
            raise KeyError(f"{key!r} is not one of {self._names()}")
        setattr(self, key, value)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def _names(self):
        return [f.name for f in fields(self)]

    def copy(self):
        """A shallow copy (the tensors are shared)."""
        return replace(self)


@dataclass(eq=False)
class MeanVariance(_FieldMapping):
    """Reverse-process Gaussian p(x_{t-1} | x_t): each tensor shaped like x_t `[batch, d]`.

    `extra` is the second item when the model returns a tuple `(output, extra)`, else None.
    """

    mean: torch.Tensor
    variance: torch.Tensor
    log_variance: torch.Tensor
    pred_xstart: torch.Tensor
    extra: Optional[Any] = None


@dataclass(eq=False)
class SampleStep(_FieldMapping):
    """One reverse step: the new sample and the x₀ estimate it used, `[batch, d]`."""

    sample: torch.Tensor
    pred_xstart: torch.Tensor
