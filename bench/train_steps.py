"""Benchmark stages for one optimiser step of each training stage of the small recipe (`recipes/`).

Each stage builds the recipe's model, loss and `Trainer` settings from its YAML file and times
`Trainer.train_step` on random tensors of the recipe's shapes (assets per step, SDF and colour
samples, batch size, condition grids): a step costs the same whatever the values, so no dataset is
needed. The recipe's family time is about 5,000 + 2 x 2,500 transmitter steps and 6,000 text
steps in a row (`recipes/README.md`), so these rows say where it goes. `Context.tiny` uses 2
assets or rows per step to check the harness only.
"""
import tempfile
from pathlib import Path
from typing import Callable

import torch

from bench.stage_types import Context, Prepared

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"


def _recipe(name: str) -> dict:
    from shap_e.train.run import read_training_config

    config = read_training_config(RECIPES / f"{name}.yaml")
    config["model"] = str(REPO / config["model"])
    config["train"] = dict(config["train"], out_dir=tempfile.mkdtemp(prefix="shap_e_bench_train_"), progress=False)
    return config


def transmitter_step(ctx: Context) -> Prepared:
    """One step of `recipes/transmitter-small.yaml` (stage 1: encoder, params projection and decoder),
    built by `transmitter_trainer` as `shap-e train` builds it, on random records of the recipe's sizes."""
    from shap_e.train.run import build_transmitter, transmitter_trainer
    from shap_e.encoding.targets import AssetTargets
    from shap_e.train.transmitter_training import AssetRecord
    from shap_e.models.transmitter.batch import MultimodalBatch

    config = _recipe("transmitter-small")
    if ctx.tiny:
        config["assets_per_step"] = 2
    assets = int(config["assets_per_step"])
    n_points = build_transmitter(config["model"], None, torch.device("meta")).encoder.batch_options()["point_count"]
    n_sdf_targets = config["targets"]["n_near"] + config["targets"]["n_uniform"]
    n_color_targets = config["targets"]["n_color"]
    g = torch.Generator().manual_seed(ctx.seed)

    def record() -> AssetRecord:
        points = MultimodalBatch(points=torch.rand(1, 6, n_points, generator=g) * 2 - 1)
        sdf_points, sdf = torch.rand(n_sdf_targets, 3, generator=g) * 2 - 1, torch.randn(n_sdf_targets, generator=g)
        color_points = torch.rand(n_color_targets, 3, generator=g) * 2 - 1
        colors = torch.rand(n_color_targets, 3, generator=g)
        return AssetRecord(points, AssetTargets(sdf_points, sdf * 0.1, color_points, colors))

    records = [record() for _ in range(assets)]
    config["train"]["seed"] = ctx.seed
    trainer, _, _ = transmitter_trainer(config, records)
    info = {"assets_per_step": assets, "n_sdf": int(config["n_sdf"]), "n_color": int(config["n_color"]),
            "points": n_points, "device": str(next(trainer.model.parameters()).device)}
    return Prepared(trainer.train_step, info, after=lambda record: {"loss": round(record["loss"], 4)})


def prior_step(stage: str) -> Callable[[Context], Prepared]:
    """One step of `recipes/{stage}-small.yaml` (the text or image prior, with the recipe's latent probe),
    built by `diffusion_trainer` as `shap-e train` builds it (on `training_device()`)."""

    def setup(ctx: Context) -> Prepared:
        from shap_e.models.caption_hint import HINT_ATTRIBUTES
        from shap_e.train.caption_hint_fit import LABELS_OF
        from shap_e.train.diffusion_training import LatentDataset
        from shap_e.train.run import diffusion_trainer, read_config

        config = _recipe(f"{stage}-small")
        model_config = read_config(config["model"])
        if ctx.tiny:
            config["batch_size"] = 2
        rows = 4 * int(config["batch_size"])
        g = torch.Generator().manual_seed(ctx.seed)
        latents = torch.rand(rows, model_config["d_latent"], generator=g) * 2 - 1
        labels = {}  # colour / category labels, for a prior with caption hints
        if "image_encoder" in model_config:  # uint8 renders, as `shap-e latents --stage image` stores them
            size = model_config["image_encoder"]["image_size"]
            conditions = torch.randint(0, 256, (rows, 3, size, size), generator=g, dtype=torch.uint8)
        else:  # caption token states (one fewer per caption hint, whose tokens the trainer appends)
            inner = model_config["inner"]
            hints = {a: model_config[f"{a}_hint"] for a in HINT_ATTRIBUTES if model_config.get(f"{a}_hint")}
            conditions = torch.randn(rows, inner["grid_channels"], inner["grid_tokens"] - len(hints), generator=g)
            for attribute, n_classes in hints.items():
                labels[LABELS_OF[attribute]] = torch.randint(0, n_classes, (rows,), generator=g)
                if ctx.tiny:
                    key = f"{attribute}_hint_fit"
                    config[key] = dict(config.get(key) or {}, steps=1)
        config["train"]["seed"] = ctx.seed
        run = diffusion_trainer(stage, config, LatentDataset(latents, conditions, **labels))
        info = {"batch_size": int(config["batch_size"]), "conditions": list(run.dataset.conditions.shape[1:]),
                "latent_probe": run.probe_weight, "device": str(next(run.model.parameters()).device)}
        return Prepared(run.trainer.train_step, info, after=lambda record: {"loss": round(record["loss"], 4)})

    return setup


SETUPS = {"transmitter": transmitter_step, "text": prior_step("text"), "image": prior_step("image")}
