"""`map` over worker processes that each run torch with one thread, results in input order.

Long data preparation (an asset's winding numbers, its supervision samples) is independent per item
and seeded per item, so it can run side by side on the machine's cores without changing a result:
with one torch thread in the caller too, each item comes out the same, tensor for tensor, for any
number of workers. Workers are forked where `fork` exists, so the calling script needs no
`if __name__ == "__main__":` guard; where it does not (Windows) they are spawned and it does. As in
torch's DataLoader, a forked worker must run torch with one thread (OpenMP can hang in a fork).
"""
import multiprocessing
import signal
from typing import Callable, Iterable, Iterator, TypeVar

import torch

Item = TypeVar("Item")
Result = TypeVar("Result")


def imap_in_processes(fn: Callable[[Item], Result], items: Iterable[Item], workers: int) -> Iterator[Result]:
    """`fn(item)` for every item, in order, computed by `workers` processes (1: lazily in this one).

    `fn` must be a module-level function and the items picklable (they are sent to the workers).
    With several workers, results are computed ahead of the consumer.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int of at least 1, got {workers!r}")
    if workers == 1:
        return map(fn, items)
    return _pool_imap(fn, items, workers)


def _pool_imap(fn: Callable[[Item], Result], items: Iterable[Item], workers: int) -> Iterator[Result]:
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = multiprocessing.get_context(method).Pool(workers, initializer=_start_worker)
    try:
        yield from pool.imap(fn, items)
        pool.close()  # every result is in: the workers finish and exit, no signal needed
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _start_worker() -> None:
    """One torch thread, and SIGTERM's default action: a forked worker inherits the `shap-e` command's
    SIGTERM handler (which unwinds the main thread to remove temporaries), and with it a `terminate()`
    could not stop a worker waiting for work. After the last result the pool is closed, not
    terminated: killing a worker that holds the task queue's lock left the others waiting forever."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
