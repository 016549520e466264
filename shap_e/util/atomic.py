"""Atomic file writes: readers never see a half-written file, and a failure leaves nothing behind."""
import os
import secrets
from pathlib import Path
from typing import Union

__all__ = ["write_atomic"]

PathLike = Union[str, os.PathLike]


def write_atomic(path: PathLike, data: Union[bytes, str]) -> None:
    """Write `data` (bytes, or text as UTF-8) to `path` through a temporary file in the same
    directory and `os.replace`. Raises OSError naming `path`.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    created = False
    try:
        # os.open with mode 0o666 gives the file the permissions a plain open() would (umask applies).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        created = True
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as error:
        if created:
            tmp.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise OSError(error.errno, f"cannot write {path}: {error.strerror or error}") from error
        raise
