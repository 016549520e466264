"""Checks of numbers and tensors at the package's boundary, raising one-line, named errors.

`check_number` and `check_int` validate a user's argument (finite, of the right type, in range) and
name it in the error; `check_finite` refuses a tensor holding NaN or infinity and says which stage
produced it.
"""
import math
import numbers
from typing import Any, Optional

from shap_e.util.errors import InvalidArgumentError, NonFiniteError

__all__ = ["check_finite", "check_int", "check_number", "shorten"]


def _text(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _range_text(low: Optional[float], high: Optional[float], low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{_text(low)}, {_text(high)}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {_text(low)}"
    if high is not None:
        return f" {'<' if high_open else '<='} {_text(high)}"
    return ""


def check_number(
    value: Any,
    name: str,
    low: Optional[float] = None,
    high: Optional[float] = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """`value` as a float after checking that it is a finite real number within the bounds.

    `low`/`high` are inclusive unless `low_open`/`high_open`. Raises InvalidArgumentError naming `name`.
    """
    expected = f"{name} must be a finite number{_range_text(low, high, low_open, high_open)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{expected}, got {shorten(repr(value))}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidArgumentError(f"{expected}, got {number}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise InvalidArgumentError(f"{expected}, got {number:g}")
    return number


def check_int(value: Any, name: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """`value` after checking that it is an int (not a bool) in `[low, high]`; the error names `name`."""
    expected = f"{name} must be an integer{_range_text(low, high, False, False)}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{expected}, got {shorten(repr(value))}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidArgumentError(f"{expected}, got {shorten(str(value))}")
    return int(value)


def check_finite(tensor: Any, what: str, hint: str) -> None:
    """Raise NonFiniteError when the tensor `what` (e.g. "the sampled latent") holds NaN or infinity.

    `hint` says what to change (e.g. "lower the guidance scale"); the message counts the bad entries.
    """
    import torch

    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return
    bad = ~torch.isfinite(tensor)
    if bool(bad.any()):
        raise NonFiniteError(f"{what} holds {int(bad.sum())} NaN or infinite values of {tensor.numel()}; {hint}",
                             stage=what)


def shorten(text: str, limit: int = 60) -> str:
    """`text` cut to at most `limit` characters, with "..." where it was cut (for quoting user input)."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
