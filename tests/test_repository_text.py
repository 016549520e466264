"""The repository's text: it speaks of the project in the present tense, and its two commands agree."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import shap_e

ROOT = Path(__file__).resolve().parents[1]
# A diary's marks: a numbered working session, or a measurement placed on the machine at hand instead
# of naming its hardware. History belongs in CHANGELOG.md and git. (`[ ]` keeps this file from matching.)
DIARY = r"session [0-9]|this[ ]machine|shared[ ]machine"


def _tracked_lines_matching(pattern: str):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    result = subprocess.run(
        ["git", "grep", "-n", "-I", "-i", "-E", pattern, "--", ".", ":(exclude)CHANGELOG.md"],
        cwd=ROOT, capture_output=True, text=True,
    )
    if result.returncode not in (0, 1):
        pytest.skip(f"git grep failed: {result.stderr.strip()}")
    return result.stdout.splitlines()


def test_no_tracked_file_outside_the_changelog_speaks_of_sessions_or_this_machine():
    hits = _tracked_lines_matching(DIARY)
    assert hits == [], "state the command and hardware instead:\n" + "\n".join(hits[:20])


def _block_after(text: str, marker: str) -> str:
    """The first line of the first fenced block after `marker`."""
    tail = text[text.index(marker):]
    return re.search(r"```bash\n(.+?)\n", tail).group(1)


def test_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    readme_command = _block_after(readme, "Run the tests")
    assert readme_command.endswith("python -m pytest -q")
    assert readme_command in ci_lines


def test_readme_run_command_installs_the_package_and_generates_offline():
    command = _block_after((ROOT / "README.md").read_text(), "Run it offline")
    assert "pip install -q -e ." in command and 'shap-e text "a red cube"' in command


def test_version_is_one_in_the_package_the_metadata_and_the_changelog():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{shap_e.__version__}"' in pyproject
    assert f"## [{shap_e.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_readme_and_model_cards_stay_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    for card in (ROOT / "model_cards").glob("*.md"):
        assert len(card.read_text().splitlines()) <= 150, card.name
