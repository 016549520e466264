"""Run by `torchrun --nproc_per_node 2` in test_loop.py: train the toy model with DDP on gloo."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from toy import toy_batch, toy_loss, toy_model  # noqa: E402

from shap_e.train.loop import TrainConfig, Trainer  # noqa: E402
from shap_e.util.distributed import process_group  # noqa: E402

if __name__ == "__main__":
    torch.set_num_threads(1)
    config = TrainConfig(steps=6, lr=1e-2, ema_decay=0.9, out_dir=sys.argv[1], progress=False, checkpoint_every=6)
    with process_group():  # the trainer and its DDP model go inside the block (process_group's docstring)
        Trainer(toy_model(), toy_loss, toy_batch, config).fit()
