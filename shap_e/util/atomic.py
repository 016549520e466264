"""Atomic outputs: readers never see a half-written file or folder, and nothing is lost on failure.

A file or folder is first written under a temporary name beside its destination and renamed into
place only once complete. Temporary names start with `TEMP_PREFIX` and carry a tag of the host and
the writing process's id, so that `clean_stale_temporaries` can remove what a killed process left
behind (ours only: the prefix, the owner, this host, and a process that no longer runs) without
touching a temporary that another running process still writes. Files and folders are created with
the permissions a plain `open()`/`mkdir()` gives (the user's umask applies).
"""
import hashlib
import os
import re
import secrets
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Union

from shap_e.util.errors import OutputLocationError

if TYPE_CHECKING:
    import torch

__all__ = [
    "TEMP_PREFIX",
    "atomic_directory",
    "check_writable",
    "clean_stale_temporaries",
    "temporary_path",
    "write_atomic",
    "write_atomic_with",
    "write_safetensors",
]

PathLike = Union[str, os.PathLike]
TEMP_PREFIX = ".shap-e-tmp-"
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}-")
_NAME_KEPT = 80  # characters of the destination's name kept in a temporary's name (names stay < 255 bytes)


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def temporary_path(path: PathLike) -> Path:
    """A fresh temporary name beside `path` that ends in `path`'s own name (and so its suffix: writers
    such as `torch.save` or imageio may pick the format from it)."""
    path = Path(path)
    name = path.name[-_NAME_KEPT:]
    return path.parent / f"{TEMP_PREFIX}{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}-{name}"


def write_atomic(path: PathLike, data: Union[bytes, str]) -> None:
    """Write `data` (bytes, or text as UTF-8) to `path` atomically (see `write_atomic_with`)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    write_atomic_with(path, lambda tmp: tmp.write_bytes(payload))


def write_atomic_with(path: PathLike, write: Callable[[Path], None]) -> None:
    """Let `write(tmp)` fill a temporary file beside `path`, then move it onto `path` (`os.replace`).

    The temporary is removed when `write` fails or is interrupted. Raises OSError naming `path`.
    """
    path = Path(path)
    tmp = temporary_path(path)
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


@contextmanager
def atomic_directory(final: PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; it becomes `final` only if the block succeeds.

    An existing `final` is an OutputLocationError unless `overwrite`: then it is replaced only once
    the new folder is complete (moved aside, the new one renamed into place, the old one deleted).
    On any failure or interruption the temporary folder is removed and `final` is as it was.
    """
    final = Path(final)
    if (final.exists() or final.is_symlink()) and not overwrite:
        raise OutputLocationError(f"{final} already exists; it is kept (replace it with --overwrite)")
    tmp = temporary_path(final)
    try:
        os.mkdir(tmp, 0o777)
    except OSError as error:
        raise OutputLocationError(f"cannot write to {final.parent}: {error.strerror or error}") from error
    try:
        yield tmp
        old = None
        if final.exists() or final.is_symlink():
            old = temporary_path(final)
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            _remove(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def check_writable(folder: PathLike) -> Path:
    """Create `folder` (and its parents) if needed and check that files can be created in it.

    Raises OutputLocationError naming the folder and the reason (a file in the way, no permission,
    a read-only file system). Returns the folder.
    """
    folder = Path(folder)
    blocker = next((p for p in (folder, *folder.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise OutputLocationError(f"cannot write to {folder}: {blocker} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = temporary_path(folder / "probe")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        probe.unlink()
    except OSError as error:
        raise OutputLocationError(f"cannot write to {folder}: {error.strerror or error}") from error
    return folder


def clean_stale_temporaries(folder: PathLike) -> List[Path]:
    """Remove the temporaries that killed processes of this package left in `folder`; return them.

    Only entries named with `TEMP_PREFIX` by this host, owned by this user, whose writing process no
    longer runs are removed; anything else (another user's, another machine's on a shared disk, a
    running process's) is left alone.
    """
    folder = Path(folder)
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match is None or match["host"] != _host_tag() or _process_runs(int(match["pid"])):
            continue
        try:
            owner = entry.lstat().st_uid
        except OSError:
            continue
        if hasattr(os, "getuid") and owner != os.getuid():
            continue
        _remove(entry)
        removed.append(entry)
    return removed


def _process_runs(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # Windows' os.kill(pid, 0) would end the process
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # it exists (another user's), or we cannot tell: keep its files
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
