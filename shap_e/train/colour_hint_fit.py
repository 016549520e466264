"""Fit a prior's colour hint (`shap_e.models.colour_hint.ColourHint`) before the prior trains.

The read-out is fitted to the latent dataset's own caption grids and colour labels (`LatentDataset`'s
`colours`, written by `shap-e latents --stage text`): `steps` AdamW steps of cross-entropy on random
batches. Then every caption grid gets its hint token appended, and the prior trains on those grids,
as it will see them when it samples. Everything random is drawn from `seed` inside a forked random
state, so the fit is deterministic and leaves the training's own random stream untouched. A prior
started from weights (`init`) gets its read-out fitted afresh as well, to the data it trains on.
"""
import copy
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from shap_e.models.colour_hint import ColourHint
from shap_e.models.configs import settings_of
from shap_e.train.diffusion_training import LatentDataset


@dataclass
class ColourHintFitConfig:
    """The fit's settings; every field can be set under `colour_hint_fit:` in a text training config."""

    steps: int = 300
    batch_size: int = 512
    lr: float = 3e-3
    weight_decay: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"colour_hint_fit needs steps and batch_size of at least 1, got {self.steps} and "
                             f"{self.batch_size}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(f"colour_hint_fit needs lr > 0 and weight_decay >= 0, got {self.lr} and "
                             f"{self.weight_decay}")


def check_hint_inputs(hint: ColourHint, dataset: LatentDataset, grid_tokens: int) -> None:
    """Raise `ValueError` unless `dataset` holds `[n, channels, grid_tokens - 1]` caption grids and
    colour labels within the read-out's classes."""
    conditions = dataset.conditions
    if conditions.dim() != 3 or conditions.shape[1] != hint.channels or conditions.shape[2] != grid_tokens - 1:
        raise ValueError(
            f"a colour-hint prior with grid_tokens {grid_tokens} trains on caption grids of {grid_tokens - 1} "
            f"tokens (its hint is the last); these conditions are {list(conditions.shape)}: make the latents "
            f"with `shap-e latents --stage text --text-tokens {grid_tokens - 1}`"
        )
    if dataset.colours is None:
        raise ValueError("the latents have no colour labels for the colour hint: make them with `shap-e latents "
                         "--stage text` from a dataset whose captions.jsonl names each asset's colours")
    if int(dataset.colours.min()) < 0 or int(dataset.colours.max()) >= hint.n_classes:
        raise ValueError(f"colour labels run from {int(dataset.colours.min())} to {int(dataset.colours.max())}; "
                         f"the model config's colour_hint has {hint.n_classes} classes")


def fit_colour_hint(hint: ColourHint, grids: torch.Tensor, labels: torch.Tensor, config: ColourHintFitConfig,
                    progress: bool = True) -> float:
    """Fit `hint` in place to `grids [n, channels, tokens]` and `labels [n]`; returns its accuracy on them.

    The read-out starts from `nn.Linear`'s initialisation drawn from `config.seed`; the global random
    state is restored afterwards.
    """
    tokens = grids.float().transpose(1, 2)  # [n, tokens, channels]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        hint.score.reset_parameters()
        hint.out.reset_parameters()
        hint.requires_grad_(True)
        optimizer = torch.optim.AdamW(hint.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        for _ in tqdm(range(config.steps), desc="colour hint", disable=not progress):
            index = torch.randint(0, len(tokens), (config.batch_size,))
            loss = nn.functional.cross_entropy(hint.logits(tokens[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    hint.requires_grad_(False)
    with torch.no_grad():
        return (hint.logits(tokens).argmax(-1) == labels).float().mean().item()


def hinted_dataset(hint: ColourHint, dataset: LatentDataset, grid_tokens: int, config: ColourHintFitConfig,
                   progress: bool = True) -> Tuple[LatentDataset, float]:
    """Fit `hint` on `dataset` and return the dataset with every grid's hint token appended
    (`[n, channels, grid_tokens]`), and the read-out's accuracy on the training captions.

    The fit and the hint tokens are computed on the CPU, where the dataset is (the same numbers for a
    prior on any device); the fitted weights are then copied into `hint`.
    """
    check_hint_inputs(hint, dataset, grid_tokens)
    on_cpu, grids = copy.deepcopy(hint).cpu(), dataset.conditions.cpu()
    accuracy = fit_colour_hint(on_cpu, grids, dataset.colours.cpu().long(), config, progress)
    conditions = on_cpu.append_hint(grids)
    hint.load_state_dict(on_cpu.state_dict())
    return LatentDataset(dataset.latents, conditions, dataset.provenance, dataset.colours), accuracy


def colour_hint_data(model: nn.Module, dataset: LatentDataset, config: Dict[str, Any],
                     progress: bool = True) -> Tuple[LatentDataset, Optional[float]]:
    """The training data of a prior: for one with a colour hint, its read-out is fitted (the text
    training `config`'s `colour_hint_fit` settings) and the dataset comes back with the hint token
    appended to every grid, with the read-out's training accuracy; otherwise `(dataset, None)`."""
    hint = getattr(model, "colour_hint", None)
    if hint is None:
        if "colour_hint_fit" in config:
            raise ValueError("colour_hint_fit fits a prior's colour hint; the model config has no colour_hint")
        return dataset, None
    fit = settings_of(config, "colour_hint_fit", ColourHintFitConfig)
    return hinted_dataset(hint, dataset, model.wrapped.grid_shape[1], fit, progress)
