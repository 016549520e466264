"""Train a stage from a YAML config: `shap-e train text|image --config FILE` or `python -m shap_e.train`.

Transmitter config keys: `model` (a Transmitter config dict or registry name), `data` (a folder of
mesh files), `cache_dir` (encoder batches), `assets_per_step`, `n_sdf`, `n_color`, `n_rays`
(supervision samples per asset and step), `loss_weights` (`sdf`, `color`, `nerf`), `data_workers`
(processes that prepare the assets before training, default 1; the records are the same for any
number), `init`, `freeze_decoder` (optional, default false: train the encoder alone, keeping the
latent -> field map fixed, so that priors trained on the initial weights' latents decode as before;
see `freeze_decoder`), `train`.

Diffusion config keys: `model` (a model config dict or YAML file, or a registry name such as
`text300M` to build its architecture), `diffusion` (a diffusion config dict, YAML file or registry
name), `data` (a latent dataset file, see
`LatentDataset`), `batch_size`, `init` (optional: a registry name or a weights file to start from,
e.g. `text300M` for fine-tuning), `normalize_latents` (optional, default false: standardise every
latent dimension with the data's mean and standard deviation, through the diffusion's
`channel_scales`/`channel_biases`; the diffusion config used is written to `out_dir/diffusion.yaml`,
and sampling needs that config), `condition_noise` (optional, default 0: text-embedding augmentation,
see `diffusion_batch_fn`), `token_dropout` (optional, default 0: word dropout on caption token grids,
see `diffusion_batch_fn`), `latent_probe` (optional, default 0: for a prior that owns its image
encoder, the weight of an auxiliary latent regression from the encoder's grid, see
`LatentProbeObjective`; only the prior is exported), `head_refit` (optional: for a prior with a latent
head, a mapping of `HeadRefitConfig` fields, `{}` for the defaults; after the last step the head is
fitted afresh on the frozen encoder, see `shap_e.train.head_refit`), `colour_hint_fit` and
`category_hint_fit` (optional: for a prior with that caption hint, a mapping of `HintFitConfig`
fields; the read-out is always fitted before the first step, with the defaults when the key is
absent, see `shap_e.train.caption_hint_fit`)
and `train` (the fields of `TrainConfig`).

Either kind of file may name `extends: other.yaml` and give only what differs (`read_training_config`).
"""
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import torch
import yaml

from shap_e.train.loop import TrainConfig, Trainer, check_stop_at
from shap_e.util.atomic import write_atomic, write_safetensors
from shap_e.util.config import check_keys, settings_of

if TYPE_CHECKING:
    from shap_e.train.diffusion_training import LatentDataset
    from shap_e.train.head_refit import HeadRefitConfig
    from shap_e.models.nerstf.derived_heads import NerfHeadSettings
    from shap_e.train.transmitter_training import AssetRecord

DIFFUSION_KEYS = {
    "model", "diffusion", "data", "batch_size", "init", "normalize_latents", "condition_noise", "token_dropout",
    "latent_probe", "head_refit", "colour_hint_fit",
    "category_hint_fit", "train",
}
TRANSMITTER_KEYS = {
    "model", "data", "cache_dir", "assets_per_step", "n_sdf", "n_color", "n_rays", "loss_weights", "targets",
    "point_candidates", "data_workers", "init", "freeze_decoder", "nerf_heads", "train",
}
TARGET_KEYS = {"n_near", "n_uniform", "n_color", "sigma", "n_surface"}


def read_training_config(path, _seen: Tuple[Path, ...] = ()) -> Dict[str, Any]:
    """The settings of a training config file.

    A file may start from another: `extends: base.yaml` (a path relative to the file) takes every
    setting of the base and then this file's, mappings merged key by key (`train: {lr: 1e-4}`
    changes the learning rate and keeps the base's other `train` settings).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training config {str(path)!r} does not exist")
    if path.resolve() in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve()))
        raise ValueError(f"training configs extend each other in a cycle: {chain}")
    config = yaml.safe_load(path.read_text()) or {}
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a mapping of training settings")
    base = config.pop("extends", None)
    if base is None:
        return config
    if not isinstance(base, str):
        raise ValueError(f"{path}: extends must be the path of one config file, got {base!r}")
    return merge_settings(read_training_config(path.parent / base, (*_seen, path.resolve())), config)


def merge_settings(base: Dict[str, Any], override: Dict[str, Any]) -> Dict[str, Any]:
    """`base` updated with `override`; where both hold a mapping under a key, merged recursively."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = merge_settings(merged[key], value)
        merged[key] = value
    return merged


def is_config_file(value) -> bool:
    """True when a config reference names a YAML file rather than a registry entry."""
    return isinstance(value, (str, Path)) and str(value).endswith((".yaml", ".yml"))


def read_config(value) -> Dict[str, Any]:
    """A config given inline (a dict), as a YAML file path, or as a registry name (e.g. `diffusion`)."""
    from shap_e.models.download import load_config

    if isinstance(value, dict):
        return value
    if is_config_file(value):
        return read_training_config(value)
    return load_config(str(value))


def training_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def build_model(model_config, init: Optional[str], device: torch.device) -> torch.nn.Module:
    """A model from a config dict, a YAML config file or a registry name, optionally initialised from weights."""
    from shap_e.models.configs import model_from_config
    from shap_e.models.download import load_config, load_model, load_state_dict_file, load_state_dict_strict

    if isinstance(model_config, str) and not is_config_file(model_config):
        if init == model_config:
            return load_model(model_config, device=device)
        model_config = load_config(model_config)
    model = model_from_config(model_config, device=device)
    if init is not None:
        if Path(init).is_file():
            load_state_dict_strict(model, load_state_dict_file(init, device), init)
        else:
            load_state_dict_strict(model, load_model(init, device=device).state_dict(), init)
    return model


@dataclass
class DiffusionRun:
    """What `diffusion_trainer` builds from a text or image prior config."""

    trainer: Trainer
    model: torch.nn.Module  # the prior (the trainer's module is a `LatentProbeObjective` when `probe_weight`)
    dataset: "LatentDataset"
    diffusion_config: Dict[str, Any]  # with the latent standardisation when `normalize_latents`
    refit: Optional["HeadRefitConfig"]
    probe_weight: float
    # each caption hint's accuracy on the training captions, e.g. {"colour_hint_accuracy": 0.9998}
    hint_accuracy: Dict[str, float] = field(default_factory=dict)


def diffusion_trainer(stage: str, config: Dict[str, Any], dataset: Optional["LatentDataset"] = None) -> DiffusionRun:
    """The checked `Trainer` of a text or image prior config, on `dataset` (a `LatentDataset`; by
    default the config's `data` file). `bench/train_steps.py` times its steps on random tensors."""
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.train.caption_hint_fit import caption_hint_data
    from shap_e.train.diffusion_training import (
        LatentDataset,
        LatentProbeObjective,
        diffusion_batch_fn,
        diffusion_loss_fn,
        latent_probe_loss_fn,
        take_over_cond_dropout,
    )

    if stage not in ("text", "image"):
        raise ValueError(f"stage {stage!r} is not a diffusion stage; valid: ['text', 'image']")
    check_keys(config, DIFFUSION_KEYS, f"{stage} training")
    missing = sorted({"model", "diffusion", "data"} - set(config))
    if missing:
        raise ValueError(f"the {stage} training config lacks {missing}")
    train_config = TrainConfig(**dict(config.get("train") or {}))
    device = training_device()
    torch.manual_seed(train_config.seed)
    model = build_model(config["model"], config.get("init"), device)
    expected = ("text", "text_grid") if stage == "text" else ("image_grid",)
    if model.conditioning not in expected:
        raise ValueError(
            f"the model is conditioned on {model.conditioning!r}, but stage {stage!r} needs "
            f"{' or '.join(map(repr, expected))}"
        )
    dataset = dataset if dataset is not None else LatentDataset.load(config["data"])
    _check_text_layers(model, dataset.provenance)
    dataset, hint_accuracy = caption_hint_data(model, dataset, config, train_config.progress)
    diffusion_config = dict(read_config(config["diffusion"]))
    if config.get("normalize_latents", False):
        diffusion_config.update(latent_standardization(dataset.latents))
    diffusion = diffusion_from_config(diffusion_config)
    p_drop = take_over_cond_dropout(model)
    batch_fn = diffusion_batch_fn(
        dataset, diffusion.num_timesteps, int(config.get("batch_size", 8)), train_config.seed, p_drop,
        condition_noise=float(config.get("condition_noise", 0.0)),
        token_dropout=float(config.get("token_dropout", 0.0)),
    )
    refit = head_refit_config(config, model, dataset)
    probe_weight = float(config.get("latent_probe", 0.0))
    if probe_weight:
        objective = LatentProbeObjective(model, diffusion, probe_weight).to(device)
        trainer = Trainer(objective, latent_probe_loss_fn(device), batch_fn, train_config)
    else:
        trainer = Trainer(model, diffusion_loss_fn(diffusion, device), batch_fn, train_config)
    return DiffusionRun(trainer, model, dataset, diffusion_config, refit, probe_weight, hint_accuracy)


def _check_text_layers(model: torch.nn.Module, provenance: Dict[str, str]) -> None:
    """Refuse latents whose captions were read from other MiniLM hidden states than the prior reads
    when it samples (`shap-e latents --text-layers` against the model config's `text_layers`).
    Latents without a provenance (made by other code, or by early 0.1.0 code) are not checked."""
    from shap_e.train.latents import text_layers_record

    if "stage" not in provenance:
        return
    made = provenance.get("text_layers")
    reads = getattr(model, "text_layers", None)
    if made != text_layers_record(reads):
        source = "MiniLM's last layer" if made is None else f"MiniLM's hidden states {made}"
        raise ValueError(
            f"the latents' captions were read from {source}, but the model config says text_layers: {reads}; "
            f"make the latents with `shap-e latents --text-layers` matching the config (none for the last layer)"
        )


def train_diffusion(stage: str, config: Dict[str, Any], resume: bool = False,
                    stop_at: Optional[int] = None) -> Optional[Path]:
    """Train a text or image prior; returns the path of the exported (EMA) weights, or None when
    `stop_at` (`Trainer.fit`) ended the run before its last step (its checkpoint resumes it)."""
    check_stop_at(stop_at)
    run = diffusion_trainer(stage, config)
    trainer = run.trainer
    if trainer.rank == 0:
        write_yaml(run.diffusion_config, trainer.out_dir / "diffusion.yaml")
        write_yaml({"data": str(config["data"]), **run.dataset.provenance}, trainer.out_dir / "dataset.yaml")
    if run.hint_accuracy and not resume:
        trainer.log({name: round(value, 6) for name, value in run.hint_accuracy.items()})
    if resume:
        trainer.resume()
    trainer.fit(stop_at)
    if not trainer.finished:
        return None
    if run.refit is not None and trainer.rank == 0:
        refit_exported_head(trainer, run.model, run.dataset, run.refit)
    return export_weights(trainer, prefix="prior." if run.probe_weight else "")


def head_refit_config(config: Dict[str, Any], model: torch.nn.Module, dataset) -> Optional["HeadRefitConfig"]:
    """The `head_refit` settings of a diffusion config (None without the key), checked before training."""
    from shap_e.train.head_refit import HeadRefitConfig, check_refit_inputs

    if "head_refit" not in config:
        return None
    refit = settings_of(config, "head_refit", HeadRefitConfig)
    check_refit_inputs(model, dataset.conditions, dataset.latents)
    return refit


def refit_exported_head(trainer: Trainer, model: torch.nn.Module, dataset, refit: "HeadRefitConfig") -> None:
    """Refit `model.latent_head` (`shap_e.train.head_refit`) and make it the head that is exported,
    in the EMA average too when there is one."""
    from shap_e.train.head_refit import refit_latent_head

    if trainer.ema is not None:
        trainer.ema.copy_to(trainer.model)  # the exported encoder is the averaged one: fit the head on it
    refit_latent_head(model, dataset.conditions, dataset.latents, refit, trainer.config.progress, trainer.log)
    if trainer.ema is not None:
        trainer.ema.shadow.update({k: v.detach().float().clone() for k, v in trainer.model.state_dict().items()
                                   if k in trainer.ema.shadow})


def latent_standardization(latents: torch.Tensor, min_std: float = 1e-3) -> Dict[str, list]:
    """`channel_scales`/`channel_biases` (`[d_latent]` lists) that map `latents` `[n, d_latent]` to
    zero mean and unit variance per dimension: `x * (1 / std) - mean / std`, std floored at `min_std`.

    The population statistics are used, so repeating every latent the same number of times (one
    row per condition) gives the same values as the distinct latents."""
    latents = latents.double()
    mean = latents.mean(0)
    std = latents.std(0, unbiased=False).clamp(min=min_std)
    def short(values: torch.Tensor) -> list:  # 7 significant digits: float32 precision, compact YAML
        return [float(f"{v:.7g}") for v in values.tolist()]

    return {"channel_scales": short(1 / std), "channel_biases": short(-mean / std)}


def write_yaml(config: Dict[str, Any], path: Path) -> None:
    """Write a config as YAML, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=120))


def transmitter_settings(config: Dict[str, Any]) -> Tuple[TrainConfig, Dict[str, float], Dict[str, Any]]:
    """A transmitter config's checked `train`, `loss_weights` and `targets` settings."""
    check_keys(config, TRANSMITTER_KEYS, "transmitter training")
    missing = sorted({"model", "data"} - set(config))
    if missing:
        raise ValueError(f"the transmitter training config lacks {missing}")
    train_config = TrainConfig(**dict(config.get("train") or {}))
    weights = dict(config.get("loss_weights") or {})
    check_keys(weights, {"sdf", "color", "nerf", "sdf_band"}, "loss_weights")
    target_options = dict(config.get("targets") or {})
    check_keys(target_options, TARGET_KEYS, "targets")
    nerf_head_settings(config)
    return train_config, weights, target_options


def nerf_head_settings(config: Dict[str, Any]) -> Optional["NerfHeadSettings"]:
    """`nerf_heads:` of a transmitter config (absent: None; `{}`: the defaults): the exported weights'
    NeRF heads are then derived from their SDF and STF colour heads (`shap_e.models.nerstf.derived_heads`)."""
    from shap_e.models.nerstf.derived_heads import NerfHeadSettings

    if "nerf_heads" not in config:
        return None
    return settings_of(config, "nerf_heads", NerfHeadSettings)


def build_transmitter(model_config, init: Optional[str], device: torch.device) -> torch.nn.Module:
    """`build_model` for the transmitter stage: the model must be a Transmitter."""
    model = build_model(model_config, init, device)
    if not hasattr(model, "encoder"):
        raise ValueError("stage 'transmitter' needs a Transmitter model config (name: Transmitter)")
    return model


def transmitter_records(config: Dict[str, Any], encoder: torch.nn.Module):
    """`load_asset_records` of a transmitter config: `(records, skipped)`."""
    from shap_e.train.transmitter_training import load_asset_records, mesh_files

    train_config, _, target_options = transmitter_settings(config)
    return load_asset_records(
        mesh_files(config["data"]), encoder, config.get("cache_dir"), train_config.seed, train_config.progress,
        random_sample_count=int(config.get("point_candidates", 2**19)), target_options=target_options,
        workers=int(config.get("data_workers", 1)),
    )


def prepare_transmitter_data(config: Dict[str, Any]) -> Tuple[int, int]:
    """Fill the config's `cache_dir` with the encoder batches and supervision its training reads, and
    stop: `(assets prepared, assets skipped)`.

    The records depend on the data, the seed, the model's architecture and the sampling settings only,
    never on `init` weights, so a later stage's data can be prepared while an earlier stage trains
    (`recipes/family.sh`). The training run then reads every record from the cache: the same tensors
    it would have computed, so its weights do not change.
    """
    transmitter_settings(config)
    if config.get("cache_dir") is None:
        raise ValueError("preparing the data needs `cache_dir` in the config: without a cache nothing is kept")
    model = build_transmitter(config["model"], None, torch.device("cpu"))  # the architecture alone: no weights
    records, skipped = transmitter_records(config, model.encoder)
    return len(records), len(skipped)


def transmitter_trainer(
    config: Dict[str, Any], records: Optional[List["AssetRecord"]] = None
) -> Tuple[Trainer, List["AssetRecord"], list]:
    """The checked `Trainer` of a transmitter config: `(trainer, records, skipped)`. `records` (a list of
    `AssetRecord`) defaults to the config's data (`transmitter_records`: prepared, or read from its
    cache). `bench/train_steps.py` times its steps on random records."""
    from shap_e.train.transmitter_training import (
        LossWeights,
        freeze_decoder,
        transmitter_batch_fn,
        transmitter_loss_fn,
    )

    train_config, weights, _ = transmitter_settings(config)
    device = training_device()
    torch.manual_seed(train_config.seed)
    model = build_transmitter(config["model"], config.get("init"), device)
    if config.get("freeze_decoder", False):
        if config.get("init") is None:
            raise ValueError("freeze_decoder: true needs `init` (the weights whose decoder is kept); a random "
                             "decoder would stay random")
        freeze_decoder(model)
    skipped: list = []
    if records is None:
        records, skipped = transmitter_records(config, model.encoder)
    batch_fn = transmitter_batch_fn(
        records, int(config.get("assets_per_step", 4)), int(config.get("n_sdf", 4096)),
        int(config.get("n_color", 2048)), int(config.get("n_rays", 1024)), train_config.seed,
    )
    trainer = Trainer(model, transmitter_loss_fn(LossWeights(**weights), device), batch_fn, train_config)
    return trainer, records, skipped


def train_transmitter(config: Dict[str, Any], resume: bool = False, stop_at: Optional[int] = None) -> Optional[Path]:
    """Train the encoder + decoder on a folder of meshes; returns the path of the exported weights, or
    None when `stop_at` (`Trainer.fit`) ended the run before its last step (its checkpoint resumes it)."""
    check_stop_at(stop_at)
    trainer, records, skipped = transmitter_trainer(config)
    trainer.log({"step": trainer.step, "assets": len(records), "skipped_assets": len(skipped)})
    if resume:
        trainer.resume()
    trainer.fit(stop_at)
    if not trainer.finished:
        return None
    settings = nerf_head_settings(config)
    if settings is None:
        return export_weights(trainer)
    from shap_e.models.nerstf.derived_heads import derive_nerf_heads_in_state

    return export_weights(trainer, transform=lambda state: derive_nerf_heads_in_state(state, settings))


def export_weights(
    trainer: Trainer, prefix: str = "",
    transform: Optional[Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]]] = None,
) -> Path:
    """Write the final weights (the EMA average when there is one) as safetensors: those of the
    trained module's entries whose names start with `prefix`, without it (e.g. `prior.` for a
    `LatentProbeObjective`, whose probe is not exported), passed through `transform` if given."""
    path = trainer.out_dir / "model.safetensors"
    if trainer.rank == 0:
        state = trainer.ema.state_dict() if trainer.ema is not None else trainer.model.state_dict()
        exported = {
            k[len(prefix):]: state.get(k, v).to(v.dtype)
            for k, v in trainer.model.state_dict().items() if k.startswith(prefix)
        }
        write_safetensors(path, exported if transform is None else transform(exported))
    return path
