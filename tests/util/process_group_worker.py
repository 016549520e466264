"""Run by `torchrun --nproc_per_node 2` in test_distributed.py: join the group in `process_group()`,
do DDP work in it (`work`) or raise from it (`fail`), then write to <out>/rank<r>.json what this rank
saw, including the names of the threads left in the process (Linux)."""
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from shap_e.util.distributed import distributed_info, process_group, rank_share


def thread_names():
    tasks = Path("/proc/self/task")
    return sorted((task / "comm").read_text().strip() for task in tasks.iterdir()) if tasks.is_dir() else None


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, out = sys.argv[1], Path(sys.argv[2])
    seen = {}
    try:
        with process_group():
            seen["joined"] = dist.is_initialized()
            if mode == "fail":
                raise RuntimeError("the work failed")
            total = torch.tensor([dist.get_rank() + 1.0])
            dist.all_reduce(total)
            seen["all_reduce"] = total.item()
            seen["share"] = rank_share(list(range(5)))
            seen["info"] = distributed_info()
            model = DistributedDataParallel(torch.nn.Linear(3, 1))
            model(torch.randn(2, 3)).sum().backward()
            del model
    except RuntimeError as e:
        seen["error"] = str(e)
    seen["joined_after"] = dist.is_initialized()
    seen["threads_after"] = thread_names()
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
