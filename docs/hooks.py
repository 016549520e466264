"""mkdocs hooks: the site is the repository's own documents, and the CLI reference is generated.

The pages keep their repository paths (`README.md` is the home page, `model_cards/text-small.md`,
`docs/training.md`, ...), so every relative link works the same on the site and in the repository,
and `mkdocs build --strict` checks them all. `docs/cli.md` is written from the `shap-e` argument
parsers at build time, so the reference cannot drift from the command.
"""
import argparse
import os
from pathlib import Path
from typing import Iterator, List, Tuple

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
# Repository documents on the site: (folder, glob) pairs relative to the root.
DOCUMENTS = (
    (".", "README.md"),
    (".", "CHANGELOG.md"),
    ("docs", "**/*.md"),
    ("model_cards", "**/*.md"),
    ("recipes", "README.md"),
    ("bench", "README.md"),
    ("samples", "README.md"),
    ("samples", "**/*.gif"),
    ("samples", "**/*.glb"),
)
CLI_PAGE = "docs/cli.md"
HELP_WIDTH = 100


def document_paths(root: Path = ROOT) -> List[str]:
    """Repository-relative paths of the documents the site is built from."""
    found = {
        path.relative_to(root).as_posix()
        for folder, pattern in DOCUMENTS
        for path in (root / folder).glob(pattern)
        if path.is_file() and "node_modules" not in path.parts
    }
    return sorted(found)


def _subcommands(parser: argparse.ArgumentParser, prog: str) -> Iterator[Tuple[str, argparse.ArgumentParser]]:
    """(full command, parser) for `parser` and every sub-command below it, depth first."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, f"{prog} {name}")


def cli_reference() -> str:
    """The Markdown page of every `shap-e` command: its `--help` text under a heading."""
    from shap_e.cli import build_parser

    lines = [
        "# Command line",
        "",
        "Every `shap-e` command with its options, generated from the command's own argument parsers",
        "when the site is built (`shap-e COMMAND --help` prints the same).",
        "",
    ]
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)  # argparse wraps help text at the terminal's width
    try:
        for command, parser in _subcommands(build_parser(), "shap-e"):
            lines += [f"## `{command}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    finally:
        if previous is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(lines)


def on_files(files: Files, config) -> Files:
    """Replace the docs folder's files by the repository's documents at their repository paths."""
    docs_dir = os.path.abspath(config.docs_dir)
    site = Files([f for f in files if f.src_dir is None or os.path.abspath(f.src_dir) != docs_dir])
    for path in document_paths():
        site.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    site.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    return site
