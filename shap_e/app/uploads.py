"""Checks on what the page receives, and error messages fit to show on it.

An upload is accepted only from the upload folder, with a listed file type and under the size
limit; a message shown on the page carries no server path (each becomes its file name).
"""
import re
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["MESH_TYPES", "PICTURE_TYPES", "InputError", "check_upload", "public_message"]

PICTURE_TYPES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
MESH_TYPES = (".glb", ".obj", ".ply", ".stl", ".off")
MIB = 1024 * 1024
# An absolute POSIX or Windows path, up to a quote, a space or the end.
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:\\|/)(?:[^\s'\"/\\]+[/\\])*([^\s'\"/\\]+)")


class InputError(ValueError):
    """Bad input from the page; its message is shown there."""


def check_upload(path: Optional[str], types: Sequence[str], what: str, max_bytes: int, upload_root: Path) -> Path:
    """The uploaded file at `path`, checked: present, inside `upload_root`, one of `types`, at most
    `max_bytes`. Raises `InputError` naming what is wrong and what is accepted."""
    if not path:
        raise InputError(f"upload a {what} first ({', '.join(types)})")
    file = Path(path).resolve()
    if not file.is_relative_to(upload_root.resolve()) or not file.is_file():
        raise InputError(f"the {what} must be uploaded through the page")
    if file.suffix.lower() not in types:
        raise InputError(f"{file.name}: a {what} must be one of {', '.join(types)}")
    size = file.stat().st_size
    if size > max_bytes:
        raise InputError(f"{file.name} is {size / MIB:.1f} MB; uploads are limited to {max_bytes / MIB:g} MB "
                         "(shap-e app --max-upload-mb)")
    return file


def public_message(error: BaseException) -> str:
    """The first line of `error`'s message with every absolute path shortened to its file name."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return _PATH.sub(lambda match: match.group(1), text)
