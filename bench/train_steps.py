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

from bench.stages import Context, Prepared

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"


def _recipe(name: str) -> dict:
    from shap_e.train.run import read_training_config

    config = read_training_config(RECIPES / f"{name}.yaml")
    config["model"] = str(REPO / config["model"])
    config["train"] = dict(config["train"], out_dir=tempfile.mkdtemp(prefix="shap_e_bench_train_"), progress=False)
    return config


def transmitter_step(ctx: Context) -> Prepared:
    """One step of `recipes/transmitter-small.yaml` (stage 1: encoder, params projection and decoder)."""
    from shap_e.train.loop import Trainer
    from shap_e.train.run import build_transmitter, transmitter_settings
    from shap_e.train.transmitter_training import LossWeights, TransmitterBatch, transmitter_loss_fn
    from shap_e.util.batch import MultimodalBatch

    config = _recipe("transmitter-small")
    train_config, weights, _ = transmitter_settings(config)
    torch.manual_seed(ctx.seed)
    model = build_transmitter(config["model"], None, ctx.device)
    assets = 2 if ctx.tiny else int(config["assets_per_step"])
    n_sdf, n_color = int(config["n_sdf"]), int(config["n_color"])
    n_points = model.encoder.batch_options()["point_count"]
    g = torch.Generator().manual_seed(ctx.seed)
    batch = TransmitterBatch(
        MultimodalBatch(points=torch.rand(assets, 6, n_points, generator=g) * 2 - 1),
        torch.rand(assets, n_sdf, 3, generator=g) * 2 - 1, torch.randn(assets, n_sdf, generator=g) * 0.1,
        torch.rand(assets, n_color, 3, generator=g) * 2 - 1, torch.rand(assets, n_color, 3, generator=g),
        None, None,
    )
    trainer = Trainer(model, transmitter_loss_fn(LossWeights(**weights), ctx.device), lambda *_: batch, train_config)
    info = {"assets_per_step": assets, "n_sdf": n_sdf, "n_color": n_color, "points": n_points}
    return Prepared(trainer.train_step, info, after=lambda record: {"loss": round(record["loss"], 4)})


def prior_step(stage: str) -> Callable[[Context], Prepared]:
    """One step of `recipes/{stage}-small.yaml` (the text or image prior, with the recipe's latent probe),
    built by `diffusion_trainer` as `shap-e train` builds it (on `training_device()`)."""

    def setup(ctx: Context) -> Prepared:
        from shap_e.train.diffusion_training import LatentDataset
        from shap_e.train.run import diffusion_trainer, read_config

        config = _recipe(f"{stage}-small")
        model_config = read_config(config["model"])
        if ctx.tiny:
            config["batch_size"] = 2
        rows = 4 * int(config["batch_size"])
        g = torch.Generator().manual_seed(ctx.seed)
        latents = torch.rand(rows, model_config["d_latent"], generator=g) * 2 - 1
        if "image_encoder" in model_config:  # uint8 renders, as `shap-e latents --stage image` stores them
            size = model_config["image_encoder"]["image_size"]
            conditions = torch.randint(0, 256, (rows, 3, size, size), generator=g, dtype=torch.uint8)
        else:  # caption token states
            inner = model_config["inner"]
            conditions = torch.randn(rows, inner["grid_channels"], inner["grid_tokens"], generator=g)
        config["train"]["seed"] = ctx.seed
        run = diffusion_trainer(stage, config, LatentDataset(latents, conditions))
        info = {"batch_size": int(config["batch_size"]), "conditions": list(conditions.shape[1:]),
                "latent_probe": run.probe_weight, "device": str(next(run.model.parameters()).device)}
        return Prepared(run.trainer.train_step, info, after=lambda record: {"loss": round(record["loss"], 4)})

    return setup


SETUPS = {"transmitter": transmitter_step, "text": prior_step("text"), "image": prior_step("image")}
