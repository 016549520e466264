"""The `shap-e` command line: a thin layer over the library.

Every command prints progress on stderr and writes its outputs atomically. A mistake or accident
the user can fix (bad input, no network, a damaged file, a missing device, a request too large for
the machine, a non-finite result) is one line on stderr and exit status 2, never a traceback:
the line is the message of the library's `ShapEError`. SIGINT exits with 130 and SIGTERM with 143,
leaving only complete outputs.
"""
import argparse
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator, List, NoReturn, Optional

import yaml

from shap_e import __version__
from shap_e.cli.common import CliError
from shap_e.util.errors import ShapEError, one_line

__all__ = ["CliError", "build_parser", "main"]

# OSError covers a full disk, a vanished folder, a read-only file system; YAMLError a broken config
# file: the user's to fix.
USER_ERRORS = (ShapEError, ValueError, OSError, MemoryError, yaml.YAMLError)
_MESSAGE_LIMIT = 400


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (`shap-e text: error: ...`), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_clip(one_line(message))} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from shap_e.cli import app, assets, data, generate, models, train
    from shap_e.cli import eval as evaluation

    parser = OneLineParser(
        prog="shap-e", description="Generate, encode, decode and train Shap-E 3D models."
    )
    parser.add_argument("--version", action="version", version=f"shap-e {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (generate, assets, models, train, data, evaluation, app):
        module.add_commands(commands)
    return parser


def _user_facing_warnings(show_other):
    """A `warnings.showwarning` that prints a `PromptTruncatedWarning` as one line for the user and
    hands every other warning to `show_other`."""
    from shap_e.util.prompt_warnings import PromptTruncatedWarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, PromptTruncatedWarning):
            print(f"warning: {message}", file=sys.stderr)
        else:
            show_other(message, category, filename, lineno, file, line)

    return show


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt, so temporaries are removed on the way out."""


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM raises `Terminated` instead of killing
    the process on the spot."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clip(message: str) -> str:
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."


def error_line(error: BaseException) -> str:
    """The one line printed for a user's error: its message, whitespace folded, clipped."""
    text = one_line(str(error))
    if isinstance(error, OSError) and not isinstance(error, ShapEError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    if isinstance(error, MemoryError):
        text = "out of memory; use a smaller --grid-size, --size, --render-size or --batch"
    return _clip(text or type(error).__name__)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings(), _sigterm_unwinds():
            warnings.showwarning = _user_facing_warnings(warnings.showwarning)
            args.run(args)
    except USER_ERRORS as error:
        print(f"shap-e {args.command}: error: {error_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    return 0
