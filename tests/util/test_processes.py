"""imap_in_processes: the same results in the same order for any number of workers."""
import pytest
import torch

from shap_e.util.processes import imap_in_processes


def _seeded_draw(seed: int) -> torch.Tensor:
    return torch.randn(5, generator=torch.Generator().manual_seed(seed)) * torch.get_num_threads()


def _threads(_: int) -> int:
    return torch.get_num_threads()


def test_two_workers_give_the_results_of_one_process_in_input_order():
    seeds = [7, 3, 11, 0, 5]
    torch.set_num_threads(1)
    alone = list(imap_in_processes(_seeded_draw, seeds, 1))
    side_by_side = list(imap_in_processes(_seeded_draw, seeds, 2))
    assert len(side_by_side) == len(seeds)
    for a, b in zip(alone, side_by_side):
        assert torch.equal(a, b)
    assert not torch.equal(alone[0], alone[1])


def test_workers_run_torch_with_one_thread():
    assert list(imap_in_processes(_threads, range(4), 2)) == [1, 1, 1, 1]


def test_one_worker_is_lazy_and_runs_in_this_process():
    calls = []
    results = imap_in_processes(calls.append, [1, 2], 1)  # a local function could not be sent to a worker
    assert calls == []
    assert list(results) == [None, None] and calls == [1, 2]


@pytest.mark.parametrize("bad", [0, -1, 2.0, "2"])
def test_a_worker_count_below_one_or_not_an_int_is_named(bad):
    with pytest.raises(ValueError, match="workers must be an int of at least 1"):
        imap_in_processes(_threads, [1], bad)


def _sigterm_action(_):
    import signal

    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_workers_die_on_sigterm_even_under_a_command_that_handles_it():
    import signal

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # as `shap-e` does while a command runs
    try:
        assert list(imap_in_processes(_sigterm_action, range(4), workers=2)) == [True] * 4
    finally:
        signal.signal(signal.SIGTERM, previous)
