"""A toy regression task for the training-loop tests (also run by the torchrun worker)."""
import torch
import torch.nn as nn

from shap_e.train.loop import step_generator

SEED = 3
PER_RANK_BATCH = 8


def toy_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))


def toy_batch(step: int, rank: int, world_size: int):
    g = step_generator(SEED, step, rank)
    x = torch.randn(PER_RANK_BATCH, 4, generator=g)
    return x, torch.sin(x).sum(dim=1, keepdim=True)


def combined_batch(world_size: int):
    """What `world_size` ranks see together, as one process's batch."""

    def batch_fn(step: int, rank: int, _world: int):
        parts = [toy_batch(step, r, world_size) for r in range(world_size)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    return batch_fn


def toy_loss(model, batch):
    x, y = batch
    return {"loss": ((model(x) - y) ** 2).mean()}
