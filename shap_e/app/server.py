"""`serve`: build the page over a `Backend` and serve it until interrupted.

Everything the app writes (Gradio's uploads and copies, the jobs' folders) lives in one temporary
folder, removed when the server stops; files of a finished job go after `keep_minutes`.
"""
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from shap_e.app.backend import Backend
from shap_e.app.jobs import Jobs, log
from shap_e.app.uploads import MIB

__all__ = ["AppSettings", "serve"]

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class AppSettings:
    """How `shap-e app` serves: address, Gradio share link, upload limit, file lifetime, queue size."""

    host: str = "127.0.0.1"
    port: int = 7860
    share: bool = False
    max_upload_mb: float = 50.0
    keep_minutes: float = 60.0
    max_queue: int = 8

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port (--port) must be in 0..65535, got {self.port}")
        for name in ("max_upload_mb", "keep_minutes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} (--{name.replace('_', '-')}) must be positive, got {getattr(self, name)}")
        if self.max_queue < 1:
            raise ValueError(f"max_queue (--max-queue) must be at least 1, got {self.max_queue}")


def serve(backend: Backend, settings: AppSettings) -> None:
    """Serve the app on `settings.host:settings.port` until Ctrl+C or SIGTERM."""
    root = Path(tempfile.mkdtemp(prefix="shap_e_app_"))
    # Gradio reads its folders and analytics switch when imported.
    os.environ["GRADIO_TEMP_DIR"] = str(root / "uploads")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from shap_e.app.handlers import Handlers
    from shap_e.app.ui import build_demo, theme

    keep_seconds = settings.keep_minutes * 60
    jobs = Jobs(root / "jobs", keep_seconds)
    max_bytes = int(settings.max_upload_mb * MIB)
    handlers = Handlers(backend, jobs, root / "uploads", max_bytes)
    demo = build_demo(handlers, backend, keep_seconds)
    demo.queue(max_size=settings.max_queue, default_concurrency_limit=1)
    jobs.start_sweeper()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo.launch(server_name=settings.host, server_port=settings.port, share=settings.share,
                    max_file_size=max_bytes, show_error=False, ssr_mode=False, mcp_server=False, quiet=True,
                    theme=theme(), prevent_thread_lock=True)
        log(f"serving on http://{settings.host}:{settings.port} (Ctrl+C stops)")
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        log("stopping")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        demo.close(verbose=False)
        if not jobs.stop(timeout=STOP_TIMEOUT_S):
            log(f"a job was still running after {STOP_TIMEOUT_S} s; its files may stay in {root}")
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
