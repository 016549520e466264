"""Latent diffusion training: the loss falls, CFG dropout is in the batch, data errors are clear."""
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.models.configs import model_from_config
from shap_e.train.diffusion_training import (
    LatentDataset,
    diffusion_batch_fn,
    diffusion_loss_fn,
    take_over_cond_dropout,
)
from shap_e.train.loop import TrainConfig, Trainer

TINY_TEXT = {
    "name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4,
    "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 1, "heads": 2,
              "time_token_cond": True, "token_cond": True, "use_pos_emb": True, "cond_width": 16,
              "cond_drop_prob": 0.25},
}


def tiny_dataset():
    g = torch.Generator().manual_seed(0)
    conditions = torch.nn.functional.normalize(torch.randn(4, 16, generator=g), dim=1)
    latents = torch.tanh(torch.randn(4, 32, generator=g))
    return LatentDataset(latents, conditions)


def test_text_diffusion_loss_falls_on_a_tiny_dataset(tmp_path):
    torch.manual_seed(0)
    model = model_from_config(TINY_TEXT)
    diffusion = diffusion_from_config({"schedule": "exp", "timesteps": 64, "mean_type": "x_start"})
    p = take_over_cond_dropout(model)
    assert p == 0.25 and model.wrapped.cond_drop_prob == 0.0
    batch_fn = diffusion_batch_fn(tiny_dataset(), 64, batch_size=16, seed=0, cond_drop_prob=p)
    config = TrainConfig(steps=150, lr=3e-3, out_dir=str(tmp_path), progress=False, ema_decay=0.0)
    trainer = Trainer(model, diffusion_loss_fn(diffusion, torch.device("cpu")), batch_fn, config)
    losses = [trainer.train_step()["mse"] for _ in range(150)]
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20


def test_batches_are_a_function_of_seed_step_and_rank():
    fn = diffusion_batch_fn(tiny_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5)
    a, b, c = fn(3, 0, 1), fn(3, 0, 1), fn(3, 1, 2)
    assert torch.equal(a.noise, b.noise) and torch.equal(a.t, b.t)
    assert not torch.equal(a.noise, c.noise)
    dropped = (a.conditions.abs().sum(dim=1) == 0).sum()
    assert 0 < dropped < 8  # with p = 0.5 some rows are unconditional


def test_dataset_rejects_misaligned_rows_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="row-aligned"):
        LatentDataset(torch.zeros(3, 8), torch.zeros(2, 4))
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        LatentDataset.load(tmp_path / "nope.safetensors")


def test_dataset_round_trips_through_safetensors(tmp_path):
    data = tiny_dataset()
    data.save(tmp_path / "d.safetensors")
    back = LatentDataset.load(tmp_path / "d.safetensors")
    assert torch.equal(back.latents, data.latents) and torch.equal(back.conditions, data.conditions)
