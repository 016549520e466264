"""The `shap-e` command line: a thin layer over the library.

Every command prints progress on stderr, writes its outputs atomically and, on bad input, exits
with status 2 and a one-line reason.
"""
import argparse
import sys
import warnings
from typing import List, Optional

from shap_e import __version__
from shap_e.cli.common import CliError

__all__ = ["CliError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from shap_e.cli import app, assets, data, generate, models, train
    from shap_e.cli import eval as evaluation

    parser = argparse.ArgumentParser(
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


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _user_facing_warnings(warnings.showwarning)
            args.run(args)
    except (CliError, ValueError, FileNotFoundError, PermissionError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"shap-e {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
