"""The exceptions for mistakes and accidents a user can cause, each with a one-line message.

Every error the package raises for bad input, a missing network, a damaged file, an absent device,
a request too large for the machine or a non-finite result is a `ShapEError`. Its message is one
line that says what went wrong and what to do; the `shap-e` command prints exactly that line
(prefixed with the command) and exits with status 2. `ShapEError` is a `ValueError`, so code that
already catches `ValueError` for bad arguments keeps working.
"""
from typing import Any, Optional

__all__ = [
    "ChecksumError",
    "CorruptFileError",
    "DeviceUnavailableError",
    "DownloadError",
    "InvalidArgumentError",
    "NonFiniteError",
    "OutputLocationError",
    "ResourceLimitError",
    "ShapEError",
    "one_line",
]


def one_line(message: str) -> str:
    """`message` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(str(message).split())


class ShapEError(ValueError):
    """A failure the user can fix; `str(error)` is one line saying what happened and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class InvalidArgumentError(ShapEError):
    """An argument is out of range, of the wrong type, not finite, or names something unknown."""


class DownloadError(ShapEError, RuntimeError):
    """A download could not be completed: no network, an HTTP error, a stalled or cut transfer.

    Also a RuntimeError, as the download errors of earlier versions were."""


class CorruptFileError(ShapEError):
    """A file exists but cannot be used: empty, truncated, of another kind, or of the wrong hash."""


class ChecksumError(CorruptFileError, RuntimeError):
    """A file's sha256 differs from the expected one (`path`, `expected`, `actual`); also a
    RuntimeError, as the official `check_hash` raises."""

    def __init__(self, path: Any, expected: str, actual: str, hint: str = "") -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"{path} has sha256 {actual} but {expected} was expected. {hint}".strip())


class DeviceUnavailableError(ShapEError):
    """The requested device does not exist on this computer."""


class ResourceLimitError(ShapEError):
    """A request needs more memory than the machine has; nothing was started."""


class OutputLocationError(ShapEError):
    """An output path cannot be written, or would replace something that must not be replaced."""


class NonFiniteError(ShapEError):
    """A stage produced (or was given) NaN or infinite values; nothing was written."""

    def __init__(self, message: str, stage: Optional[str] = None) -> None:
        self.stage = stage
        super().__init__(message)
