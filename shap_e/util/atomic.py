"""Atomic file writes: readers never see a half-written file, and a failure leaves nothing behind."""
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Optional, Union

if TYPE_CHECKING:
    import torch

__all__ = ["write_atomic", "write_atomic_with", "write_safetensors"]

PathLike = Union[str, os.PathLike]


def write_atomic(path: PathLike, data: Union[bytes, str]) -> None:
    """Write `data` (bytes, or text as UTF-8) to `path` atomically (see `write_atomic_with`)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    write_atomic_with(path, lambda tmp: tmp.write_bytes(payload))


def write_atomic_with(path: PathLike, write: Callable[[Path], None]) -> None:
    """Let `write(tmp)` fill a temporary file beside `path`, then move it onto `path` (`os.replace`).

    The temporary ends in `path`'s own suffix (writers such as `torch.save` or imageio may pick the
    format from it) and is removed when `write` fails. Raises OSError naming `path`.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp{path.suffix}"
    created = False
    try:
        # Reserve the name (O_EXCL); mode 0o666 gives the permissions a plain open() would (umask applies).
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666))
        created = True
        write(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        if created:
            tmp.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise OSError(error.errno, f"cannot write {path}: {error.strerror or error}") from error
        raise


def write_safetensors(path: PathLike, tensors: Dict[str, "torch.Tensor"],
                      metadata: Optional[Dict[str, str]] = None) -> None:
    """Write `tensors` (and the string pairs `metadata`, in the file's header) as a `.safetensors`
    file atomically, with a plain file's permissions.

    The file is serialised in memory first: safetensors' own `save_file` leaves it owner-only (0600).
    """
    from safetensors.torch import save

    write_atomic(path, save({name: t.contiguous() for name, t in tensors.items()}, metadata=metadata or None))
