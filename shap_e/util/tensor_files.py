"""Reading and writing tensor files (latents, checkpoints) safely, with one-line errors.

Files are read with `torch.load(weights_only=True)` or from `.safetensors`: a file can never run
code. A file that cannot be read (empty, truncated, random bytes, another format, pickled Python
objects) raises `CorruptFileError` saying which; the error never suggests `weights_only=False`.
"""
import io
import os
import warnings
from pathlib import Path
from typing import Any, Union

import torch

from shap_e.util.atomic import write_atomic
from shap_e.util.checks import check_finite
from shap_e.util.errors import CorruptFileError, InvalidArgumentError

__all__ = ["as_float_latent", "load_latent", "read_tensor_file", "save_latent"]

PathLike = Union[str, os.PathLike]
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def read_tensor_file(path: PathLike, what: str, device: Union[str, torch.device] = "cpu") -> Any:
    """The content of a `.safetensors` file or a torch file of tensors.

    `what` names the file in errors ("latent file", "checkpoint"). Raises InvalidArgumentError when
    the path is not a file and CorruptFileError when it cannot be read.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidArgumentError(f"{what} {str(path)!r} does not exist or is not a file")
    size = path.stat().st_size
    if size == 0:
        raise CorruptFileError(f"{what} {path} is empty (0 bytes); it is truncated or corrupt, write or download it again")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes about pickle protocols are not the user's business
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                return load_file(str(path), device=str(device))
            return _torch_load(path, device)
    except Exception as error:  # the readers raise assorted types (UnpicklingError, RuntimeError, EOFError, ...)
        raise CorruptFileError(_unreadable(path, what, size, error)) from None


def _torch_load(path: Path, device: Union[str, torch.device]) -> Any:
    """`torch.load(path, weights_only=True)`, memory-mapped when loading to the CPU (the tensors then
    share the file's pages instead of taking a copy); files in torch's legacy (pre-zip) format cannot
    be mapped and are read whole."""
    if torch.device(device).type == "cpu":
        try:
            return torch.load(path, map_location=device, weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):
                raise
    return torch.load(path, map_location=device, weights_only=True)


def _unreadable(path: Path, what: str, size: int, error: BaseException) -> str:
    text = str(error)
    if any(marker in text.lower() for marker in ("unsupported global", "unsupported class", "is blocked")):
        return (f"{what} {path} holds pickled Python objects other than tensors, which are refused for "
                "safety (loading them could run code); save plain tensors (torch.save of a tensor or a "
                "dict of tensors, or .safetensors)")
    return (f"{what} {path} could not be read ({size} bytes, {type(error).__name__}); it is truncated or "
            "corrupt, or not a torch/.safetensors file of tensors: write or download it again")


def as_float_latent(latent: Any, what: str) -> torch.Tensor:
    """`latent` as a float32 tensor: other float dtypes are cast, anything else is refused.

    Raises InvalidArgumentError for a non-tensor or an integer, boolean or complex tensor, and
    NonFiniteError for NaN or infinite entries.
    """
    if not isinstance(latent, torch.Tensor):
        raise InvalidArgumentError(f"{what} must be a tensor of floats, got {type(latent).__name__}")
    if latent.dtype not in _FLOATS:
        raise InvalidArgumentError(f"{what} holds {str(latent.dtype).replace('torch.', '')} numbers; a latent is "
                                   "floating point (float32, float16, bfloat16 or float64)")
    check_finite(latent, what, "it cannot be decoded; regenerate or re-encode it")
    return latent.float() if latent.dtype != torch.float32 else latent


def load_latent(path: PathLike) -> torch.Tensor:
    """One latent `[d]` float32 read from a file written by `save_latent`, `shap-e text` or `shap-e encode`.

    A `[1, d]` file is accepted; a batch `[n, d]` (n > 1) or anything but a tensor is refused, as
    are NaN/inf entries and non-float dtypes (floats are cast to float32).
    """
    content = read_tensor_file(path, "latent file")
    if isinstance(content, dict) and len(content) == 1:
        content = next(iter(content.values()))
    what = f"latent file {path}"
    if not isinstance(content, torch.Tensor):
        raise CorruptFileError(f"{what} does not hold a latent tensor (it holds a {type(content).__name__})")
    if content.ndim == 2 and content.shape[0] == 1:
        content = content[0]
    if content.ndim != 1:
        raise InvalidArgumentError(f"{what} holds a tensor of shape {list(content.shape)}; a latent is one flat "
                                   "vector [d] (save latents[i], not the batch)")
    return as_float_latent(content, what)


def save_latent(path: PathLike, latent: torch.Tensor) -> None:
    """Write one latent atomically as a torch file holding just that tensor (`[d]` float32, on the CPU).

    The tensor is copied first: saving a row of a batch would otherwise store the whole batch. The
    bytes depend only on the tensor (serialised in memory: torch.save names its archive after the
    file, here a temporary one).
    """
    buffer = io.BytesIO()
    torch.save(latent.detach().to("cpu", torch.float32).clone(), buffer)
    write_atomic(path, buffer.getvalue())
