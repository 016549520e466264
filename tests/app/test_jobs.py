"""Jobs: one running job per model (in the server too), cancel flags per page tab, and the
deletion of finished jobs' folders after their time."""
import json
import re
import threading
import time
from pathlib import Path

import pytest

from shap_e.app.jobs import Cancelled, Jobs
from tests.app.conftest import MAX_QUEUE, TEXT


def test_two_jobs_of_one_model_run_one_after_the_other_and_other_models_do_not_wait(tmp_path):
    jobs = Jobs(tmp_path, keep_seconds=60)
    order, waited = [], threading.Event()

    def job(name, model, hold):
        with jobs.run(f"session-{name}", "text", model, on_wait=waited.set):
            order.append(f"{name} start")
            time.sleep(hold)
            order.append(f"{name} end")

    first = threading.Thread(target=job, args=("a", "text-small", 0.3))
    first.start()
    time.sleep(0.05)
    other_model = threading.Thread(target=job, args=("c", "image-small", 0.0))
    second = threading.Thread(target=job, args=("b", "text-small", 0.0))
    other_model.start(), second.start()
    for thread in (first, second, other_model):
        thread.join()
    assert waited.is_set()
    assert order.index("a end") < order.index("b start")
    assert order.index("c end") < order.index("a end")  # image-small did not wait for text-small


def test_cancel_reaches_only_the_running_job_of_that_tab(tmp_path):
    jobs = Jobs(tmp_path, keep_seconds=60)
    assert not jobs.cancel("s", "text")
    with jobs.run("s", "text", "text-small", on_wait=lambda: None) as job:
        assert not jobs.cancel("s", "image") and not jobs.cancel("other", "text")
        job.check()
        assert jobs.cancel("s", "text")
        job.step = (3, 64)
        with pytest.raises(Cancelled, match="cancelled at step 3 of 64"):
            job.check()
    assert not jobs.cancel("s", "text")  # the flag went with the job


def test_stop_cancels_every_job_and_waits_for_the_running_one_to_end(tmp_path):
    jobs = Jobs(tmp_path, keep_seconds=60)
    started, outcome = threading.Event(), []

    def job():
        try:
            with jobs.run("s", "text", "text-small", on_wait=lambda: None) as running:
                started.set()
                while True:  # a sampler that checks its flag after every step
                    time.sleep(0.01)
                    running.check()
        except Cancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=job)
    thread.start()
    started.wait(5)
    assert jobs.stop(timeout=5)
    thread.join(5)
    assert outcome == ["cancelled"]


def test_folders_of_finished_jobs_are_deleted_after_their_time_only(tmp_path):
    jobs = Jobs(tmp_path, keep_seconds=10)
    with jobs.run("s", "text", "text-small", on_wait=lambda: None) as job:
        (job.folder / "mesh.glb").write_bytes(b"glb")
        assert jobs.sweep(now=time.monotonic() + 60) == 0  # still running
    assert jobs.sweep() == 0 and job.folder.is_dir()
    assert jobs.sweep(now=time.monotonic() + 11) == 1 and not job.folder.exists()
    with pytest.raises(ValueError, match="keep_seconds must be positive"):
        Jobs(tmp_path, keep_seconds=0)


@pytest.mark.slow
def test_two_concurrent_requests_both_finish_one_at_a_time_with_their_own_results(app_server, client,
                                                                                  cli_text_sample):
    from gradio_client import Client

    other = Client(app_server.url, verbose=False)
    before = app_server.log_text()
    first = client.submit(*TEXT.values(), api_name="/text_to_3d")
    second = other.submit(*{**TEXT, "seed": 1}.values(), api_name="/text_to_3d")
    results = [job.result(timeout=300) for job in (first, second)]
    seeds = [json.loads(Path(next(f for f in files if f.endswith("meta.json"))).read_text())["seed"]
             for _, _, _, files in results]
    assert seeds == [0, 1]
    assert Path(results[0][1]).read_bytes() == (cli_text_sample / "mesh.glb").read_bytes()
    assert Path(results[1][1]).read_bytes() != Path(results[0][1]).read_bytes()
    events = re.findall(r"job \d+ \(text-small\) (started|ended)", app_server.log_text()[len(before):])
    assert events == ["started", "ended", "started", "ended"]


@pytest.mark.slow
def test_requests_beyond_the_queue_size_are_turned_away_and_the_others_finish(client):
    jobs = [client.submit(*{**TEXT, "seed": seed, "grid_size": 16}.values(), api_name="/text_to_3d")
            for seed in range(2 + MAX_QUEUE + 2)]  # two run (two models at most), MAX_QUEUE wait
    finished, refused = [], []
    for job in jobs:
        try:
            finished.append(job.result(timeout=300))
        except Exception as error:
            refused.append(str(error))
    # At most two run and MAX_QUEUE wait: of six sent at once some are refused (how many depends on how
    # far the first ones got while the others arrived).
    assert refused and all(message == "Queue is full! Please try again." for message in refused), refused
    assert len(finished) == len(jobs) - len(refused)
    seeds = [json.loads(Path(next(f for f in files if f.endswith("meta.json"))).read_text())["seed"]
             for _, _, _, files in finished]
    assert len(set(seeds)) == len(seeds)
