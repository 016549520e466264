"""Latent diffusion training (text or image conditioned) on precomputed latents (improved-DDPM loss).

Classifier-free-guidance dropout is drawn in the batch (so that runs are reproducible from the
seed alone); the model's own dropout is switched off while it trains here. Conditions are either
precomputed embeddings (CLIP/MiniLM vectors, CLIP grids), zeroed in the batch where dropped, or
pixel images for a prior that owns its image encoder (`conditioner: grid_encoder`): those go through
the encoder inside the model's forward, with gradients, and dropped rows get the all-zero grid.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Union

import torch
import torch.nn as nn

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion
from shap_e.models.image_encoder import LatentHead
from shap_e.train.loop import step_generator
from shap_e.util.atomic import write_safetensors


def unit_pixels(pictures: torch.Tensor) -> torch.Tensor:
    """Dataset pictures `[n, 3, S, S]` as float in [-1, 1]; uint8 ones (stored 4x smaller) are converted."""
    return pictures.float() / 127.5 - 1 if pictures.dtype == torch.uint8 else pictures


# The optional per-row class labels of a LatentDataset (what caption hints are fitted to).
LABEL_FIELDS = ("colours", "categories")


@dataclass
class LatentDataset:
    """latents: `[n, d_latent]` (transmitter outputs); conditions, row-aligned with the latents:
    `[n, D]` text embeddings, `[n, channels, tokens]` image grids or caption token grids
    (`conditioner: minilm_tokens`), or pixel images for a
    `grid_encoder` prior: `[n, 3, S, S]` float in [-1, 1] or uint8 in [0, 255] (4x smaller;
    `shap_e.train.condition_images` renders them). provenance: how the dataset was made
    (`build_latent_dataset`'s settings, e.g. `caption_vocabulary`), kept in the file's header.
    colours: optional `[n]` int64 colour class of each row's asset (its first colour, an index into
    `shap_e.data.COLOURS`), the labels a prior's colour hint is fitted to. categories: likewise the
    category class (an index into `shap_e.data.CATEGORIES`), for a category hint."""

    latents: torch.Tensor
    conditions: torch.Tensor
    provenance: Dict[str, str] = field(default_factory=dict)
    colours: Optional[torch.Tensor] = None
    categories: Optional[torch.Tensor] = None

    def __post_init__(self):
        if self.latents.ndim != 2 or len(self.latents) == 0:
            raise ValueError(f"latents must be a non-empty [n, d_latent] tensor, got {list(self.latents.shape)}")
        if len(self.conditions) != len(self.latents):
            raise ValueError(
                f"{len(self.conditions)} conditions for {len(self.latents)} latents; they must be row-aligned"
            )
        for name in LABEL_FIELDS:
            labels = getattr(self, name)
            if labels is not None and (labels.shape != (len(self.latents),) or labels.is_floating_point()):
                raise ValueError(f"{name} must be [n] integer class indices row-aligned with the latents, got "
                                 f"{labels.dtype} {list(labels.shape)} for {len(self.latents)} latents")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "LatentDataset":
        """A `.safetensors` or `.pt` file holding tensors `latents` and `conditions`."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"latent dataset {str(path)!r} does not exist")
        provenance: Dict[str, str] = {}
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:  # one read: the tensors and the header's metadata
                data = {name: f.get_tensor(name) for name in f.keys()}
                provenance = dict(f.metadata() or {})
        else:
            data = torch.load(path, map_location="cpu", weights_only=True)
        missing = {"latents", "conditions"} - set(data)
        if missing:
            raise ValueError(f"{path} lacks {sorted(missing)}; it needs tensors 'latents' and 'conditions'")
        conditions = data["conditions"]
        return cls(data["latents"].float(), conditions if conditions.dtype == torch.uint8 else conditions.float(),
                   provenance, **{name: data.get(name) for name in LABEL_FIELDS})

    def save(self, path: Union[str, Path]) -> None:
        tensors = {"latents": self.latents, "conditions": self.conditions}
        for name in LABEL_FIELDS:
            if getattr(self, name) is not None:
                tensors[name] = getattr(self, name)
        write_safetensors(path, tensors, self.provenance)


@dataclass
class DiffusionBatch:
    x_start: torch.Tensor  # [batch, d_latent]
    t: torch.Tensor  # [batch] int64
    noise: torch.Tensor  # [batch, d_latent]
    conditions: torch.Tensor  # [batch, ...]: embeddings (zeroed rows = unconditional) or pixels in [-1, 1]
    keep: torch.Tensor  # [batch] bool, False = CFG-dropped (unconditional)

    @property
    def is_pixels(self) -> bool:
        """True when `conditions` are images `[batch, 3, S, S]` for the prior's own image encoder."""
        return self.conditions.dim() == 4


def diffusion_batch_fn(
    dataset: LatentDataset, num_timesteps: int, batch_size: int, seed: int, cond_drop_prob: float,
    condition_noise: float = 0.0,
    token_dropout: float = 0.0,
) -> Callable[[int, int, int], DiffusionBatch]:
    """Draws everything random in a step from `step_generator(seed, step, rank)`.

    condition_noise: for embedding conditions `[n, D]`, the std of Gaussian noise added to every
        coordinate of a drawn embedding, which is then scaled back to its own norm (a unit-norm
        MiniLM vector stays unit-norm). The prior then sees a neighbourhood of each training
        caption instead of the caption alone, as unseen paraphrases land there. 0 adds nothing and
        draws nothing (the batches are those of a run without the option).
    token_dropout: for grid conditions `[n, channels, tokens]` (caption token states), the
        probability of zeroing each token of a kept row (word dropout), so that the prior reads the
        whole caption rather than one word. 0 draws nothing.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1")
    if condition_noise < 0:
        raise ValueError(f"condition_noise={condition_noise} must be at least 0")
    if condition_noise and dataset.conditions.dim() != 2:
        raise ValueError(
            f"condition_noise applies to embedding conditions [n, D]; these are {list(dataset.conditions.shape)}"
        )
    if not 0 <= token_dropout < 1:
        raise ValueError(f"token_dropout={token_dropout} must be in [0, 1)")
    if token_dropout and dataset.conditions.dim() != 3:
        raise ValueError(
            f"token_dropout applies to grid conditions [n, channels, tokens]; these are "
            f"{list(dataset.conditions.shape)}"
        )

    def batch_fn(step: int, rank: int, world_size: int) -> DiffusionBatch:
        g = step_generator(seed, step, rank)
        index = torch.randint(0, len(dataset.latents), (batch_size,), generator=g)
        t = torch.randint(0, num_timesteps, (batch_size,), generator=g)
        x_start = dataset.latents[index]
        noise = torch.randn(x_start.shape, generator=g)
        keep = torch.rand(batch_size, generator=g) >= cond_drop_prob
        cond = dataset.conditions[index]
        if cond.dim() == 4:  # pixel images: the model's encoder sees them, `keep` zeroes its grid
            return DiffusionBatch(x_start, t, noise, unit_pixels(cond), keep)
        if condition_noise:
            cond = perturb_embeddings(cond, condition_noise, g)
        if token_dropout:
            kept_tokens = torch.rand(batch_size, cond.shape[2], generator=g) >= token_dropout
            cond = cond * kept_tokens[:, None, :].to(cond.dtype)
        cond = cond * keep.view(-1, *([1] * (cond.dim() - 1))).to(cond.dtype)
        return DiffusionBatch(x_start, t, noise, cond, keep)

    return batch_fn


def perturb_embeddings(embeddings: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """`[batch, D]` embeddings plus N(0, std^2) noise per coordinate, each row rescaled to its old norm."""
    noisy = embeddings + std * torch.randn(embeddings.shape, generator=generator)
    norm = embeddings.norm(dim=-1, keepdim=True)
    return noisy * (norm / noisy.norm(dim=-1, keepdim=True).clamp(min=1e-12))


def diffusion_loss_fn(diffusion: GaussianDiffusion, device: torch.device):
    """`loss_fn(model, batch)` for the Trainer: mean of `training_losses` (mse + vb) over the batch."""

    def loss_fn(model: nn.Module, batch: DiffusionBatch) -> Dict[str, torch.Tensor]:
        terms = diffusion.training_losses(
            model,
            batch.x_start.to(device),
            batch.t.to(device),
            model_kwargs=_model_kwargs(batch, device),
            noise=batch.noise.to(device),
        )
        return {k: v.mean() for k, v in terms.items()}

    return loss_fn


def _model_kwargs(batch: DiffusionBatch, device: torch.device) -> Dict[str, torch.Tensor]:
    """Embeddings as they are (already zeroed where dropped), or pixels plus the keep mask."""
    if batch.is_pixels:
        return {"images": batch.conditions.to(device), "keep": batch.keep.to(device)}
    return {"embeddings": batch.conditions.to(device)}


class LatentProbeObjective(nn.Module):
    """The diffusion loss of a prior that owns its image encoder, plus `weight` times a latent probe.

    The probe, a `LatentHead` MLP, reads the pictured asset's latent `[batch, d_latent]` off the
    encoder's grid `[batch, width, tokens]` averaged over the tokens; its squared error trains the
    encoder directly to see the shape, a stronger signal than the one the denoiser passes back. Every
    row's picture feeds the probe, CFG-dropped rows included (the denoiser still gets the zero grid for
    those). The probe is the prior's own `latent_head` when it has one (exported with it, a start for
    sampling); otherwise it is this objective's `probe`, for training only.

    `forward(x_start, t, noise, images, keep) -> {"loss", "mse", "vb", "latent_probe"}` (batch means).
    """

    def __init__(self, prior: nn.Module, diffusion: GaussianDiffusion, weight: float):
        super().__init__()
        if getattr(prior, "image_encoder", None) is None:
            raise ValueError("latent_probe needs a prior that owns its image encoder (conditioner: grid_encoder)")
        if weight <= 0:
            raise ValueError(f"latent_probe={weight} must be positive (0 trains without the probe)")
        self.prior, self.diffusion, self.weight = prior, diffusion, weight
        if getattr(prior, "latent_head", None) is None:
            self.probe = LatentHead(prior.image_encoder.grid_shape[0], prior.d_latent)

    def forward(
        self, x_start: torch.Tensor, t: torch.Tensor, noise: torch.Tensor, images: torch.Tensor, keep: torch.Tensor
    ) -> Dict[str, torch.Tensor]:
        """`x_start`, `noise`: `[batch, d_latent]`; `t`: `[batch]`; `images`: `[batch, 3, S, S]` in [-1, 1];
        `keep`: `[batch]` bool (False = CFG-dropped)."""
        grid = self.prior.image_encoder(images)  # [batch, width, tokens], with gradients
        terms = self.diffusion.training_losses(
            self.prior, x_start, t, model_kwargs={"embeddings": grid, "keep": keep}, noise=noise
        )
        terms = {k: v.mean() for k, v in terms.items()}
        terms["latent_probe"] = (self.read_latent(grid) - x_start).pow(2).mean()
        terms["loss"] = terms["loss"] + self.weight * terms["latent_probe"]
        return terms

    def read_latent(self, grid: torch.Tensor) -> torch.Tensor:
        """The probe's latent `[batch, d_latent]` for an encoder grid `[batch, width, tokens]`."""
        head = self.prior.latent_head if getattr(self.prior, "latent_head", None) is not None else self.probe
        return head(grid)


def latent_probe_loss_fn(device: torch.device):
    """`loss_fn(objective, batch)` for the Trainer when it trains a `LatentProbeObjective` on pixel batches."""

    def loss_fn(objective: nn.Module, batch: DiffusionBatch) -> Dict[str, torch.Tensor]:
        if not batch.is_pixels:
            raise ValueError("latent_probe trains on pixel images; this latent dataset holds embeddings")
        return objective(*(v.to(device) for v in (batch.x_start, batch.t, batch.noise, batch.conditions, batch.keep)))

    return loss_fn


def take_over_cond_dropout(model: nn.Module) -> float:
    """Switch off the model's internal CFG dropout and return its probability for the batch_fn."""
    inner = model.wrapped
    p = inner.cond_drop_prob
    inner.cond_drop_prob = 0.0
    return p
