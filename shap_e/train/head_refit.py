"""Refit an image prior's latent head on its trained, frozen image encoder.

During the diffusion training the head (`shap_e.models.image_encoder.LatentHead`) is trained as the
latent probe of `LatentProbeObjective`: batch 32, the learning rate of the prior, and an encoder
that moves under it. Once the encoder is fixed, the head is a small regression from a fixed
feature (the encoder's grid) to the latent, and a fresh head fitted with large batches reads the
held-out pictures better (`model_cards/image-small.md`). `refit_latent_head` does that fit: the
grids of all the dataset's pictures are computed once, then `steps` AdamW steps fit a newly
initialised head to the latents. Everything random is drawn from `seed`, so the result is
deterministic.
"""
import math
import time
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch
from tqdm.auto import tqdm

from shap_e.models.image_encoder import LatentHead
from shap_e.train.diffusion_training import unit_pixels


@dataclass
class HeadRefitConfig:
    """The fit's settings; every field can be set under `head_refit:` in an image training config."""

    steps: int = 4000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 0
    log_every: int = 500

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.log_every < 1:
            raise ValueError(
                f"head_refit needs steps, batch_size and log_every of at least 1, got {self.steps}, "
                f"{self.batch_size} and {self.log_every}"
            )
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(f"head_refit needs lr > 0 and weight_decay >= 0, got {self.lr} and {self.weight_decay}")


def check_refit_inputs(prior: torch.nn.Module, pictures: torch.Tensor, latents: torch.Tensor) -> None:
    """Raise `ValueError` unless `prior` has a latent head and `pictures` are `[n, 3, S, S]` pixel
    pictures row-aligned with `latents [n, d_latent]` (a text dataset holds embeddings instead)."""
    if getattr(prior, "latent_head", None) is None:
        raise ValueError("head_refit needs a prior with a latent head (model config latent_head: true)")
    if pictures.dim() != 4:
        raise ValueError("head_refit reads pixel pictures [n, 3, S, S]; got conditions of shape "
                         f"{list(pictures.shape)} (embeddings: a text dataset)")
    if len(pictures) != len(latents):
        raise ValueError(f"head_refit needs pictures row-aligned with latents [n, d_latent]; got "
                         f"{list(pictures.shape)} and {list(latents.shape)}")


@torch.no_grad()
def encoder_grids(encoder: torch.nn.Module, pictures: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """`pictures [n, 3, S, S]` (float in [-1, 1] or uint8 in [0, 255]) -> grids `[n, width, tokens]`."""
    was_training = encoder.training
    encoder.eval()
    grids = []
    for first in range(0, len(pictures), chunk):
        images = unit_pixels(pictures[first:first + chunk])
        grids.append(encoder(images.to(next(encoder.parameters()).device)).float())
    encoder.train(was_training)
    return torch.cat(grids)


def refit_latent_head(
    prior: torch.nn.Module,
    pictures: torch.Tensor,
    latents: torch.Tensor,
    config: HeadRefitConfig,
    progress: bool = True,
    log: Optional[Callable[[Dict[str, float]], None]] = None,
) -> float:
    """Replace `prior.latent_head` by a new head fitted to `latents [n, d_latent]` from the frozen
    encoder's grids of `pictures [n, 3, S, S]`; returns the mean squared error of the last step.

    The learning rate decays from `lr` to 0 on a cosine; `log` (if given) receives
    `{"head_refit_step", "head_refit_loss", "seconds"}` every `log_every` steps and at the end, where
    `seconds` is the wall time since the refit began (as the training loop logs it since training began).
    """
    start = time.monotonic()  # the logged `seconds` include computing the grids
    check_refit_inputs(prior, pictures, latents)
    grids = encoder_grids(prior.image_encoder, pictures)  # [n, width, tokens]
    device = grids.device
    latents = latents.to(device).float()
    torch.manual_seed(config.seed)
    head = LatentHead(grids.shape[1], latents.shape[1], device=device)
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    loss = torch.tensor(float("nan"))
    for step in tqdm(range(config.steps), desc="head refit", disable=not progress):
        for group in optimizer.param_groups:
            group["lr"] = config.lr * 0.5 * (1 + math.cos(math.pi * step / config.steps))
        index = torch.randint(0, len(latents), (config.batch_size,), generator=generator).to(device)
        loss = (head(grids[index]) - latents[index]).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        if log is not None and ((step + 1) % config.log_every == 0 or step + 1 == config.steps):
            log({"head_refit_step": step + 1, "head_refit_loss": loss.item(),
                 "seconds": round(time.monotonic() - start, 2)})
    prior.latent_head.load_state_dict(head.state_dict())
    return loss.item()
