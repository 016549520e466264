"""`shap-e app`: the command's checks before it serves (the served app: tests/app)."""
import importlib.util

import pytest

from shap_e.cli import main


def test_without_gradio_the_command_says_the_one_install_line_and_exits_2(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gradio" else find_spec(name, *a))
    assert main(["app"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == 'shap-e app: error: the web app needs Gradio; install it with: pip install "shap-e[app]"'


@pytest.mark.parametrize("argv,message", [
    (["--port", "70000"], "port (--port) must be in 0..65535"),
    (["--max-upload-mb", "0"], "max_upload_mb (--max-upload-mb) must be positive"),
    (["--keep-minutes", "-1"], "keep_minutes (--keep-minutes) must be positive"),
    (["--max-queue", "0"], "max_queue (--max-queue) must be at least 1"),
])
def test_bad_settings_are_one_line_and_exit_status_2(argv, message, capsys):
    pytest.importorskip("gradio")
    assert main(["app", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_host_other_than_this_computer_is_served_with_a_warning(monkeypatch, capsys):
    pytest.importorskip("gradio")
    import shap_e.app

    served = []
    monkeypatch.setattr(shap_e.app, "serve", lambda backend, settings: served.append(settings))
    assert main(["app", "--device", "cpu"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["app", "--host", "0.0.0.0", "--port", "8000", "--device", "cpu"]) == 0
    assert "warning: --host 0.0.0.0 lets other machines on the network use this app" in capsys.readouterr().err
    assert [(s.host, s.port, s.share, s.max_upload_mb) for s in served] == [("127.0.0.1", 7860, False, 50.0),
                                                                         ("0.0.0.0", 8000, False, 50.0)]
