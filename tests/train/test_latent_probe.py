"""The latent probe: an auxiliary regression that trains a prior's own image encoder to read the latent."""
import json

import pytest
import torch
from safetensors.torch import load_file

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.models.configs import model_from_config
from shap_e.train.diffusion_training import (
    LatentProbeObjective,
    diffusion_batch_fn,
    diffusion_loss_fn,
    latent_probe_loss_fn,
    take_over_cond_dropout,
)
from shap_e.train.loop import TrainConfig, Trainer
from shap_e.train.run import train_diffusion
from test_diffusion_training import (
    TINY_DIFFUSION,
    TINY_IMAGE,
    TINY_TEXT,
    tiny_dataset,
    tiny_pixel_dataset,
)

CPU = torch.device("cpu")


def tiny_objective(weight=0.5):
    torch.manual_seed(0)
    model = model_from_config(TINY_IMAGE)
    torch.nn.init.normal_(model.wrapped.output_proj.weight, std=0.5)  # zero-initialised otherwise
    p_drop = take_over_cond_dropout(model)
    return LatentProbeObjective(model, diffusion_from_config(TINY_DIFFUSION), weight), p_drop


def test_the_objective_adds_the_weighted_probe_error_to_the_unchanged_diffusion_loss():
    objective, p_drop = tiny_objective(weight=0.5)
    batch = diffusion_batch_fn(tiny_pixel_dataset(), 64, batch_size=4, seed=0, cond_drop_prob=p_drop)(2, 0, 1)
    with torch.no_grad():
        plain = diffusion_loss_fn(objective.diffusion, CPU)(objective.prior, batch)
        terms = latent_probe_loss_fn(CPU)(objective, batch)
        grid = objective.prior.image_encoder(batch.conditions)  # [4, 16, 16]
        probe_error = (objective.probe(grid) - batch.x_start).pow(2).mean()
    for key in ("mse", "vb"):
        torch.testing.assert_close(terms[key], plain[key], rtol=0, atol=0)
    torch.testing.assert_close(terms["latent_probe"], probe_error)
    torch.testing.assert_close(terms["loss"], plain["loss"] + 0.5 * probe_error)
    assert probe_error > 0


def test_the_probe_error_trains_the_encoder_and_falls(tmp_path):
    objective, p_drop = tiny_objective(weight=1.0)
    encoder_before = {k: v.clone() for k, v in objective.prior.image_encoder.state_dict().items()}
    batch_fn = diffusion_batch_fn(tiny_pixel_dataset(), 64, batch_size=8, seed=0, cond_drop_prob=p_drop)
    config = TrainConfig(steps=120, lr=3e-3, out_dir=str(tmp_path), progress=False, ema_decay=0.0)
    trainer = Trainer(objective, latent_probe_loss_fn(CPU), batch_fn, config)
    errors = [trainer.train_step()["latent_probe"] for _ in range(120)]
    assert sum(errors[-20:]) / 20 < 0.5 * sum(errors[:20]) / 20
    moved = [k for k, v in objective.prior.image_encoder.state_dict().items() if not torch.equal(v, encoder_before[k])]
    assert len(moved) == len(encoder_before)


def test_the_probe_needs_a_prior_with_its_own_image_encoder_and_a_positive_weight():
    diffusion = diffusion_from_config(TINY_DIFFUSION)
    with pytest.raises(ValueError, match="grid_encoder"):
        LatentProbeObjective(model_from_config(TINY_TEXT), diffusion, 1.0)
    with pytest.raises(ValueError, match="latent_probe=0"):
        LatentProbeObjective(model_from_config(TINY_IMAGE), diffusion, 0.0)
    objective, _ = tiny_objective()
    embedding_batch = diffusion_batch_fn(tiny_dataset(), 64, batch_size=2, seed=0, cond_drop_prob=0.0)(0, 0, 1)
    with pytest.raises(ValueError, match="pixel images"):
        latent_probe_loss_fn(CPU)(objective, embedding_batch)


def test_training_with_the_probe_exports_the_prior_alone(tmp_path):
    tiny_pixel_dataset(torch.uint8).save(tmp_path / "pixels.safetensors")
    out_dir = tmp_path / "run"
    config = {"model": TINY_IMAGE, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "pixels.safetensors"),
              "batch_size": 4, "latent_probe": 1.0,
              "train": {"steps": 3, "lr": 1e-3, "out_dir": str(out_dir), "progress": False, "ema_decay": 0.0,
                        "log_every": 1, "seed": 7}}
    state = load_file(str(train_diffusion("image", config)))
    prior = model_from_config(TINY_IMAGE)
    assert set(state) == set(prior.state_dict())
    prior.load_state_dict(state, strict=True)
    checkpoint = torch.load(out_dir / "checkpoint.pt", weights_only=True)["model"]
    for key, value in state.items():
        torch.testing.assert_close(value, checkpoint["prior." + key], rtol=0, atol=0)
    assert any(key.startswith("probe.") for key in checkpoint)
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "environment" not in r]
    assert all(r["latent_probe"] > 0 for r in records) and len(records) == 3


def test_the_probe_on_a_text_stage_is_a_clear_error(tmp_path):
    tiny_dataset().save(tmp_path / "text.safetensors")
    config = {"model": TINY_TEXT, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "text.safetensors"),
              "latent_probe": 1.0, "train": {"steps": 1, "out_dir": str(tmp_path / "run"), "progress": False}}
    with pytest.raises(ValueError, match="owns its image encoder"):
        train_diffusion("text", config)


def test_a_prior_with_a_latent_head_is_its_own_probe_and_exports_it(tmp_path):
    tiny_pixel_dataset(torch.uint8).save(tmp_path / "pixels.safetensors")
    model = dict(TINY_IMAGE, latent_head=True)
    torch.manual_seed(0)
    with_head = LatentProbeObjective(model_from_config(model), diffusion_from_config(TINY_DIFFUSION), 1.0)
    torch.manual_seed(0)
    without = LatentProbeObjective(model_from_config(TINY_IMAGE), diffusion_from_config(TINY_DIFFUSION), 1.0)
    assert not hasattr(with_head, "probe")
    # The same initial weights under the new names: a run with the head repeats a run with the probe.
    renamed = {k.replace("prior.latent_head.", "probe."): v for k, v in with_head.state_dict().items()}
    assert renamed.keys() == without.state_dict().keys()
    for key, value in without.state_dict().items():
        torch.testing.assert_close(renamed[key], value, rtol=0, atol=0)

    def run(model_config, name):
        config = {"model": model_config, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "pixels.safetensors"),
                  "batch_size": 4, "latent_probe": 1.0,
                  "train": {"steps": 3, "lr": 1e-3, "out_dir": str(tmp_path / name), "progress": False,
                            "ema_decay": 0.0, "seed": 7}}
        exported = load_file(str(train_diffusion("image", config)))
        return exported, torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["model"]

    state, checkpoint = run(model, "head")
    _, probe_checkpoint = run(TINY_IMAGE, "probe")
    prior = model_from_config(model)
    prior.load_state_dict(state, strict=True)  # the head is exported with the prior
    assert not torch.equal(state["latent_head.3.weight"], renamed["probe.3.weight"])  # it was trained
    # ... exactly as the training-only probe was: the same run under the new names.
    assert {k.replace("prior.latent_head.", "probe."): v for k, v in checkpoint.items()}.keys() == probe_checkpoint.keys()
    for key, value in checkpoint.items():
        torch.testing.assert_close(value, probe_checkpoint[key.replace("prior.latent_head.", "probe.")], rtol=0, atol=0)
