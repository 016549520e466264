"""How the page's functions turn a job's failure into what the page shows."""
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")

from shap_e.app.backend import Outcome  # noqa: E402
from shap_e.app.handlers import Handlers  # noqa: E402
from shap_e.app.jobs import Jobs  # noqa: E402


class FailingBackend:
    """Passes every check, then fails while generating with `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def check(self, request) -> None:
        pass

    def generate(self, request, output: Path, on_step) -> Outcome:
        on_step(1, 4)
        raise self.error


def text_to_3d(handlers: Handlers):
    return handlers.text_to_3d("a cube", "text-small", 0, False, 3.0, "fast", 1, 32,
                               request=gr.Request(session_hash="s"), progress=gr.Progress())


@pytest.mark.parametrize("error,shown", [
    (ValueError("'/srv/app/uploads/x/chair.obj' has no faces"), "'chair.obj' has no faces"),
    (RuntimeError("CUDA out of memory at /srv/app/torch/x.py:12"),
     "the job failed on the server (its log has the details); try other settings"),
])
def test_a_failing_job_shows_one_line_without_traceback_or_path_and_logs_the_rest(tmp_path, capsys, error, shown):
    handlers = Handlers(FailingBackend(error), Jobs(tmp_path / "jobs", 60), tmp_path / "uploads", 1024)
    with pytest.raises(gr.Error) as caught:
        text_to_3d(handlers)
    assert caught.value.message == shown
    log = capsys.readouterr().err
    assert "job 1 (text-small) started" in log and "job 1 (text-small) ended" in log
    assert ("Traceback" in log) == isinstance(error, RuntimeError)  # the server's log keeps the details
