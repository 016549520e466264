"""Run by `torchrun --nproc_per_node 2` in test_loop.py: train the toy model with DDP on gloo."""
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from toy import toy_batch, toy_loss, toy_model  # noqa: E402

from shap_e.train.loop import TrainConfig, Trainer  # noqa: E402

if __name__ == "__main__":
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    out_dir = sys.argv[1]
    config = TrainConfig(steps=6, lr=1e-2, ema_decay=0.9, out_dir=out_dir, progress=False, checkpoint_every=6)
    trainer = Trainer(toy_model(), toy_loss, toy_batch, config)
    trainer.fit()
    dist.barrier()
    dist.destroy_process_group()
    # Leave without interpreter finalisation: once in many runs, a gloo thread still being torn down
    # then aborted rank 1 ("terminate called without an active exception") after its work was done
    # and saved. What the test checks, the saved weights, is complete at this point.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
