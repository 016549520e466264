"""Joining torchrun's process group: only under torchrun, and left again, threads and all, after the
work ends or fails."""
import json
from pathlib import Path

import pytest
import torch.distributed as dist

from shap_e.util.distributed import distributed_info, launched_world_size, process_group, rank_share

WORKER = Path(__file__).parent / "process_group_worker.py"


def test_world_size_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_world_size() == 1
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert launched_world_size() == 4


@pytest.mark.parametrize("value, message", [("two", "whole number, got 'two'"), ("0", "at least 1, got 0")])
def test_a_bad_world_size_is_an_error_naming_the_variable(monkeypatch, value, message):
    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(ValueError, match=f"WORLD_SIZE must be .*{message}"):
        launched_world_size()


def test_a_plain_launch_joins_no_group_and_keeps_every_item(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with process_group():
        assert not dist.is_initialized()
        assert distributed_info() == (0, 1)
        assert rank_share([1, 2, 3]) == [1, 2, 3]


def run_worker(torchrun, tmp_path, mode):
    torchrun(str(WORKER), mode, str(tmp_path))
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def assert_left_with_its_threads(seen):
    assert seen["joined"] and not seen["joined_after"]
    if seen["threads_after"] is not None:  # Linux: gloo's threads end with the group, not at exit
        assert not [name for name in seen["threads_after"] if "gloo" in name], seen["threads_after"]


@pytest.mark.slow
def test_two_processes_share_the_items_and_leave_the_group_after_ddp_work(tmp_path, torchrun):
    seen = run_worker(torchrun, tmp_path, "work")
    assert [s["share"] for s in seen] == [[0, 2, 4], [1, 3]]
    assert [s["info"] for s in seen] == [[0, 2], [1, 2]]  # (rank, world size) inside the group
    for s in seen:
        assert s["all_reduce"] == 3.0  # 1 + 2: both ranks joined one group
        assert_left_with_its_threads(s)


@pytest.mark.slow
def test_the_group_is_left_when_the_work_raises(tmp_path, torchrun):
    for s in run_worker(torchrun, tmp_path, "fail"):
        assert s["error"] == "the work failed"
        assert_left_with_its_threads(s)
