"""The documentation site: it builds with `mkdocs build --strict`, and what its API pages show is documented."""
import importlib
import inspect
import logging
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API_PAGES = sorted((ROOT / "docs" / "api").glob("*.md"))


def _hooks():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        return importlib.import_module("hooks")
    finally:
        sys.path.remove(str(ROOT / "docs"))


def test_mkdocs_build_strict_passes_without_warnings(tmp_path, monkeypatch, caplog):
    """A broken link, a missing page or a docstring mkdocstrings cannot render fails the build."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (pip install -e '.[docs]')")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True)
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        build(config)  # strict: raises mkdocs.exceptions.Abort after any warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("mkdocs")]
    assert warnings == []
    assert (tmp_path / "site" / "index.html").is_file()
    cli_page = (tmp_path / "site" / "docs" / "cli" / "index.html").read_text()
    assert "shap-e text" in cli_page and "--guidance" in cli_page


def test_cli_reference_has_every_command_of_the_parser():
    from shap_e.cli import build_parser

    page = _hooks().cli_reference()
    commands = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"][0].choices
    for name in commands:
        assert f"## `shap-e {name}`" in page
    assert "## `shap-e eval text`" in page  # sub-commands too


def test_site_documents_keep_their_repository_paths():
    paths = _hooks().document_paths()
    expected = {"README.md", "CHANGELOG.md", "model_cards/text-small.md", "recipes/README.md", "docs/behaviour.md"}
    assert expected <= set(paths)
    assert not any(p.endswith(".py") for p in paths)


def _documented_modules():
    for page in API_PAGES:
        yield from re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.M)


def _public_objects(module):
    """Functions and classes the API page shows: the module's `__all__` and its own public definitions."""
    names = set(getattr(module, "__all__", ()))
    names |= {n for n, obj in vars(module).items()
              if not n.startswith("_") and getattr(obj, "__module__", None) == module.__name__}
    for name in sorted(names):
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield f"{module.__name__}.{name}.{attr}", member


def test_every_function_and_class_on_the_api_pages_has_a_docstring():
    modules = list(_documented_modules())
    assert {"shap_e.models.download", "shap_e.diffusion.sample", "shap_e.util.notebooks", "shap_e.encoding",
            "shap_e.rendering.export"} <= set(modules)
    missing = [name for m in modules for name, obj in _public_objects(importlib.import_module(m))
               if not (obj.__doc__ or "").strip()]
    assert missing == [], "add a docstring to: " + ", ".join(missing)
