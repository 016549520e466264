"""The app's jobs: one running job per model, a cancel flag per page tab, and temporary folders
that are deleted a while after their job ends."""
import itertools
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Tuple

__all__ = ["Cancelled", "Job", "Jobs", "log"]


def log(message: str) -> None:
    """One line on the server's stderr (the job log that tests and operators read)."""
    print(f"shap-e app: {message}", file=sys.stderr, flush=True)


class Cancelled(Exception):
    """The job's cancel button was pressed; raised between two sampler steps."""


@dataclass
class Job:
    """A running job: its number, model, folder for its files, and cancel flag."""

    number: int
    model: str
    folder: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    step: Tuple[int, int] = (0, 0)

    def check(self) -> None:
        """Raise `Cancelled` if the job's cancel button was pressed."""
        if self.cancel.is_set():
            raise Cancelled(f"cancelled at step {self.step[0]} of {self.step[1]}")


class Jobs:
    """Runs jobs one at a time per model and cleans up their folders under `root`.

    :param keep_seconds: how long the files of a finished job stay (the page links to them).
    """

    def __init__(self, root: Path, keep_seconds: float) -> None:
        if keep_seconds <= 0:
            raise ValueError(f"keep_seconds must be positive, got {keep_seconds}")
        self.root = root
        self.keep_seconds = keep_seconds
        self._numbers = itertools.count(1)
        self._guard = threading.Condition()
        self._running = 0
        self._model_locks: Dict[str, threading.Lock] = {}
        self._cancel_flags: Dict[Tuple[str, str], threading.Event] = {}
        self._finished: Dict[Path, float] = {}

    @contextmanager
    def run(self, session: str, tab: str, model: str, on_wait: Callable[[], None]) -> Iterator[Job]:
        """Wait for `model` (calling `on_wait` first when another job holds it), then yield a `Job`
        with a fresh folder; the job's cancel flag is the one `cancel(session, tab)` sets."""
        with self._guard:
            number = next(self._numbers)
            lock = self._model_locks.setdefault(model, threading.Lock())
            job = Job(number, model, self.root / f"job{number}")
            self._cancel_flags[(session, tab)] = job.cancel
        if not lock.acquire(blocking=False):
            on_wait()
            lock.acquire()
        started = time.monotonic()
        with self._guard:
            self._running += 1
        try:
            job.check()  # cancelled while it waited
            job.folder.mkdir(parents=True)
            log(f"job {number} ({model}) started")
            yield job
        finally:
            with self._guard:
                if self._cancel_flags.get((session, tab)) is job.cancel:
                    del self._cancel_flags[(session, tab)]
                self._finished[job.folder] = time.monotonic()
                self._running -= 1
                self._guard.notify_all()
            log(f"job {number} ({model}) ended after {time.monotonic() - started:.1f} s")
            lock.release()

    def cancel(self, session: str, tab: str) -> bool:
        """Ask the running job of this page tab to stop; False when it has none."""
        with self._guard:
            flag = self._cancel_flags.get((session, tab))
        if flag is None:
            return False
        flag.set()
        return True

    def stop(self, timeout: float) -> bool:
        """Cancel every job and wait up to `timeout` seconds for the running ones to end (a job stops
        at its next sampler step, or when its mesh is written); False if some still run."""
        with self._guard:
            for flag in self._cancel_flags.values():
                flag.set()
            return self._guard.wait_for(lambda: self._running == 0, timeout)

    def sweep(self, now: Optional[float] = None) -> int:
        """Delete the folders of jobs that ended more than `keep_seconds` ago; returns how many."""
        now = time.monotonic() if now is None else now
        with self._guard:
            expired = [folder for folder, ended in self._finished.items() if now - ended > self.keep_seconds]
            for folder in expired:
                del self._finished[folder]
        for folder in expired:
            shutil.rmtree(folder, ignore_errors=True)
        return len(expired)

    def start_sweeper(self) -> threading.Thread:
        """A daemon thread that sweeps every `keep_seconds / 4` (at least every minute)."""

        def loop() -> None:
            while True:
                time.sleep(min(self.keep_seconds / 4, 60.0))
                self.sweep()

        thread = threading.Thread(target=loop, name="shap-e-app-sweeper", daemon=True)
        thread.start()
        return thread
