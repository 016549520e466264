"""One `shap-e app` server for the app tests: a subprocess on a free port with the bundled models,
one torch thread, no official weights and its own temporary folder; and the CLI's reference files.

Gradio and gradio_client come with the `[app]` extra (and `[dev]`); without them the server tests skip.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 180
MAX_UPLOAD_MB = 1
MAX_QUEUE = 2
# The settings every API test asks for (small grid, fast sampler: the files, not the shapes, are under test).
TEXT = {"prompt": "a red cube", "model": "text-small", "seed": 0, "random_seed": False, "guidance": 3.0,
        "preset": "fast", "samples": 1, "grid_size": 64}
CLI_TEXT = ["text", "a red cube", "--model", "text-small", "--seed", "0", "--preset", "fast", "--grid-size", "64",
            "--format", "glb,ply,obj", "--gif", "--device", "cpu"]


@dataclass
class Server:
    url: str
    log: Path
    tmp: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"shap-e app exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"shap-e app did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def app_server(tmp_path_factory):
    """The running server; on teardown it is stopped with SIGTERM and must leave no temporary files."""
    pytest.importorskip("gradio", reason="the web app needs the [app] extra (gradio)")
    tmp = tmp_path_factory.mktemp("app_tmp")
    log = tmp_path_factory.mktemp("app_log") / "server.log"
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "SHAP_E_CACHE": str(tmp_path_factory.mktemp("app_cache"))}
    command = [sys.executable, "-m", "shap_e", "app", "--port", str(port), "--device", "cpu",
               "--max-upload-mb", str(MAX_UPLOAD_MB), "--max-queue", str(MAX_QUEUE)]
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_up(url, process, log)
        yield Server(url, log, tmp)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert not list(tmp.glob("shap_e_app_*")), "the server left its temporary folder behind"


@pytest.fixture
def client(app_server):
    """A fresh gradio_client session (its own cancel buttons and page state)."""
    Client = pytest.importorskip("gradio_client").Client

    return Client(app_server.url, verbose=False)


@pytest.fixture(scope="session")
def cli_text_sample(tmp_path_factory) -> Path:
    """The folder `shap-e text` writes for `CLI_TEXT` (run in this process, one torch thread)."""
    from shap_e.cli import main

    out = tmp_path_factory.mktemp("cli_text")
    assert main([*CLI_TEXT, "-o", str(out)]) == 0
    return out / "a_red_cube_seed0"
