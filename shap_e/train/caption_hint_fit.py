"""Fit a prior's caption hints (`shap_e.models.caption_hint.CaptionHint`) before the prior trains.

Each read-out is fitted to the latent dataset's own caption grids and labels of its attribute
(`LatentDataset`'s `colours` or `categories`, written by `shap-e latents --stage text`): `steps` AdamW
steps of cross-entropy on random batches. Then every caption grid gets the hint tokens appended, and
the prior trains on those grids, as it will see them when it samples. Everything random is drawn
from `seed` inside a forked random state, so each fit is deterministic and leaves the training's own
random stream untouched. A prior started from weights (`init`) gets its read-outs fitted afresh as
well, to the data it trains on.
"""
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Sequence, Tuple

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from shap_e.models.caption_hint import CaptionHint, append_hints
from shap_e.util.config import settings_of
from shap_e.train.diffusion_training import LatentDataset

# The LatentDataset field that holds each attribute's labels.
LABELS_OF = {"colour": "colours", "category": "categories"}


@dataclass
class HintFitConfig:
    """One read-out's fit; every field can be set under `colour_hint_fit:` / `category_hint_fit:` in a
    text training config."""

    steps: int = 300
    batch_size: int = 512
    lr: float = 3e-3
    weight_decay: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"a hint fit needs steps and batch_size of at least 1, got {self.steps} and "
                             f"{self.batch_size}")
        if self.lr <= 0 or self.weight_decay < 0:
            raise ValueError(f"a hint fit needs lr > 0 and weight_decay >= 0, got {self.lr} and "
                             f"{self.weight_decay}")


def check_hint_inputs(hints: Sequence[CaptionHint], dataset: LatentDataset, grid_tokens: int) -> None:
    """Raise `ValueError` unless `dataset` holds `[n, channels, grid_tokens - len(hints)]` caption
    grids and, for every hint, labels within its classes."""
    conditions, n_caption = dataset.conditions, grid_tokens - len(hints)
    if conditions.dim() != 3 or conditions.shape[1] != hints[0].channels or conditions.shape[2] != n_caption:
        raise ValueError(
            f"a prior with {len(hints)} caption hint(s) and grid_tokens {grid_tokens} trains on caption grids of "
            f"{n_caption} tokens (its hints are the last); these conditions are {list(conditions.shape)}: make "
            f"the latents with `shap-e latents --stage text --text-tokens {n_caption}`"
        )
    for hint in hints:
        labels = getattr(dataset, LABELS_OF[hint.attribute])
        if labels is None:
            raise ValueError(f"the latents have no {hint.attribute} labels (`{LABELS_OF[hint.attribute]}`) for the "
                             f"{hint.attribute} hint: "
                             f"make them with `shap-e latents --stage text` from a dataset whose captions.jsonl "
                             f"names each asset's category and colours")
        if int(labels.min()) < 0 or int(labels.max()) >= hint.n_classes:
            raise ValueError(f"{hint.attribute} labels run from {int(labels.min())} to {int(labels.max())}; the "
                             f"model config's {hint.attribute}_hint has {hint.n_classes} classes")


def fit_hint(hint: CaptionHint, grids: torch.Tensor, labels: torch.Tensor, config: HintFitConfig,
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
        for _ in tqdm(range(config.steps), desc=f"{hint.attribute} hint", disable=not progress):
            index = torch.randint(0, len(tokens), (config.batch_size,))
            loss = nn.functional.cross_entropy(hint.logits(tokens[index]), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    hint.requires_grad_(False)
    with torch.no_grad():
        return (hint.logits(tokens).argmax(-1) == labels).float().mean().item()


def hinted_dataset(hints: Sequence[CaptionHint], dataset: LatentDataset, grid_tokens: int,
                   configs: Sequence[HintFitConfig], progress: bool = True) -> Tuple[LatentDataset, Dict[str, float]]:
    """Fit every hint (with its config) on `dataset` and return the dataset with the hint tokens
    appended to every grid (`[n, channels, grid_tokens]`), and each read-out's accuracy on the
    training captions (`{"colour_hint_accuracy": ...}`).

    The fits and the hint tokens are computed on the CPU, where the dataset is (the same numbers for
    a prior on any device); the fitted weights are then copied into the hints.
    """
    check_hint_inputs(hints, dataset, grid_tokens)
    grids, on_cpu, accuracy = dataset.conditions.cpu(), [], {}
    for hint, config in zip(hints, configs):
        fitted = copy.deepcopy(hint).cpu()
        labels = getattr(dataset, LABELS_OF[hint.attribute]).cpu().long()
        accuracy[f"{hint.attribute}_hint_accuracy"] = fit_hint(fitted, grids, labels, config, progress)
        hint.load_state_dict(fitted.state_dict())
        on_cpu.append(fitted)
    return dataclasses.replace(dataset, conditions=append_hints(grids, on_cpu)), accuracy


def caption_hint_data(model: nn.Module, dataset: LatentDataset, config: Dict[str, Any],
                      progress: bool = True) -> Tuple[LatentDataset, Dict[str, float]]:
    """The training data of a prior: for one with caption hints, its read-outs are fitted (the text
    training `config`'s `colour_hint_fit` / `category_hint_fit` settings) and the dataset comes back
    with the hint tokens appended to every grid, with the read-outs' training accuracies; otherwise
    `(dataset, {})`."""
    hints = list(getattr(model, "hints", []))
    attributes = {hint.attribute for hint in hints}
    for attribute in LABELS_OF:
        if f"{attribute}_hint_fit" in config and attribute not in attributes:
            raise ValueError(f"{attribute}_hint_fit fits a prior's {attribute} hint; the model config has no "
                             f"{attribute}_hint")
    if not hints:
        return dataset, {}
    configs = [settings_of(config, f"{hint.attribute}_hint_fit", HintFitConfig) for hint in hints]
    return hinted_dataset(hints, dataset, model.wrapped.grid_shape[1], configs, progress)
