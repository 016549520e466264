"""Running `shap-e` in-process on the bundled models, offline, in a fresh folder."""
import pytest

from shap_e.cli import main


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty model cache in `tmp_path`, no Hugging Face network, and `tmp_path` as the working folder."""
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


def run(argv, capsys):
    """(exit status, stderr) of `shap-e argv`, in-process."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err
