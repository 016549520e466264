"""Latent diffusion training: the loss falls, CFG dropout is in the batch, data errors are clear."""
import os
import stat
from dataclasses import replace

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
    for labels in (torch.zeros(2, dtype=torch.long), torch.zeros(3)):
        with pytest.raises(ValueError, match=r"colours must be \[n\] integer class indices"):
            LatentDataset(torch.zeros(3, 8), torch.zeros(3, 4), {}, labels)
        with pytest.raises(ValueError, match=r"categories must be \[n\] integer class indices"):
            LatentDataset(torch.zeros(3, 8), torch.zeros(3, 4), {}, None, labels)


def test_dataset_round_trips_through_safetensors(tmp_path):
    data = tiny_dataset()
    data.save(tmp_path / "d.safetensors")
    back = LatentDataset.load(tmp_path / "d.safetensors")
    assert torch.equal(back.latents, data.latents) and torch.equal(back.conditions, data.conditions)
    assert back.provenance == {} and back.colours is None and back.categories is None
    labelled = replace(data, colours=torch.arange(len(data.latents)), categories=torch.arange(len(data.latents)).flip(0))
    labelled.save(tmp_path / "c.safetensors")
    back = LatentDataset.load(tmp_path / "c.safetensors")
    assert torch.equal(back.colours, labelled.colours) and torch.equal(back.categories, labelled.categories)
    replace(data, provenance={"caption_vocabulary": "augmented", "seed": "0"}).save(tmp_path / "p.safetensors")
    assert LatentDataset.load(tmp_path / "p.safetensors").provenance == {"caption_vocabulary": "augmented", "seed": "0"}


def test_dataset_file_is_readable_like_any_file_and_replaces_the_old_one(tmp_path):
    previous = os.umask(0o022)
    try:
        tiny_dataset().save(tmp_path / "d.safetensors")
        data = LatentDataset(torch.ones(2, 32), torch.ones(2, 16))
        data.save(tmp_path / "d.safetensors")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "d.safetensors").stat().st_mode) == 0o644
    assert torch.equal(LatentDataset.load(tmp_path / "d.safetensors").latents, data.latents)
    assert [p.name for p in tmp_path.iterdir()] == ["d.safetensors"]


TINY_IMAGE = {
    "name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "grid_encoder",
    "image_encoder": {"image_size": 16, "patch_size": 4, "width": 16, "layers": 1, "heads": 2},
    "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 32, "layers": 1, "heads": 2,
              "grid_channels": 16, "grid_tokens": 16, "time_token_cond": True, "use_pos_emb": True,
              "cond_drop_prob": 0.25},
}
TINY_DIFFUSION = {"schedule": "exp", "timesteps": 64, "mean_type": "x_start"}


def tiny_pixel_dataset(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 256, (4, 3, 16, 16), generator=g, dtype=torch.uint8)
    pixels = codes if dtype == torch.uint8 else codes.float() / 127.5 - 1
    return LatentDataset(torch.tanh(torch.randn(4, 32, generator=g)), pixels)


def test_image_prior_trains_its_encoder_and_the_loss_falls(tmp_path):
    torch.manual_seed(0)
    model = model_from_config(TINY_IMAGE)
    before = {k: v.clone() for k, v in model.image_encoder.state_dict().items()}
    diffusion = diffusion_from_config(TINY_DIFFUSION)
    batch_fn = diffusion_batch_fn(tiny_pixel_dataset(), 64, batch_size=16, seed=0,
                                  cond_drop_prob=take_over_cond_dropout(model))
    config = TrainConfig(steps=150, lr=3e-3, out_dir=str(tmp_path), progress=False, ema_decay=0.0)
    trainer = Trainer(model, diffusion_loss_fn(diffusion, torch.device("cpu")), batch_fn, config)
    losses = [trainer.train_step()["mse"] for _ in range(150)]
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20
    moved = [k for k, v in model.image_encoder.state_dict().items() if not torch.equal(v, before[k])]
    assert len(moved) == len(before)


def test_pixel_batches_keep_their_images_and_carry_the_dropout_mask():
    data, codes = tiny_pixel_dataset(), tiny_pixel_dataset(torch.uint8)
    batch = diffusion_batch_fn(data, 64, batch_size=8, seed=1, cond_drop_prob=0.5)(3, 0, 1)
    assert batch.is_pixels and batch.keep.dtype == torch.bool and 0 < int(batch.keep.sum()) < 8
    index = [next(i for i in range(4) if torch.equal(data.conditions[i], row)) for row in batch.conditions]
    torch.testing.assert_close(batch.x_start, data.latents[index])  # images are not zeroed, rows stay aligned
    from_codes = diffusion_batch_fn(codes, 64, batch_size=8, seed=1, cond_drop_prob=0.5)(3, 0, 1)
    torch.testing.assert_close(from_codes.conditions, batch.conditions, rtol=0, atol=0)


def test_dropped_pixel_rows_train_on_the_unconditional_zero_grid():
    torch.manual_seed(0)
    model = model_from_config(TINY_IMAGE)
    torch.nn.init.normal_(model.wrapped.output_proj.weight, std=0.5)  # zero-initialised otherwise
    take_over_cond_dropout(model)
    loss_fn = diffusion_loss_fn(diffusion_from_config(TINY_DIFFUSION), torch.device("cpu"))
    batch = diffusion_batch_fn(tiny_pixel_dataset(), 64, batch_size=4, seed=0, cond_drop_prob=0.0)(0, 0, 1)
    dropped = replace(batch, keep=torch.zeros(4, dtype=torch.bool))
    zero_grid = replace(batch, conditions=torch.zeros(4, 16, 16))
    with torch.no_grad():
        assert loss_fn(model, dropped)["loss"] == loss_fn(model, zero_grid)["loss"]
        assert loss_fn(model, batch)["loss"] != loss_fn(model, zero_grid)["loss"]


def test_train_diffusion_trains_an_image_prior_with_its_encoder_end_to_end(tmp_path):
    from safetensors.torch import load_file

    from shap_e.train.run import train_diffusion

    tiny_pixel_dataset(torch.uint8).save(tmp_path / "pixels.safetensors")
    config = {"model": TINY_IMAGE, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "pixels.safetensors"),
              "batch_size": 4, "train": {"steps": 3, "lr": 1e-3, "out_dir": str(tmp_path / "run"), "progress": False,
                                         "ema_decay": 0.0, "seed": 7}}
    state = load_file(str(train_diffusion("image", config)))
    torch.manual_seed(7)  # train_diffusion seeds the model's initialisation with the training seed
    initial = model_from_config(TINY_IMAGE).state_dict()
    model_from_config(TINY_IMAGE).load_state_dict(state, strict=True)
    for key in ("image_encoder.stem.0.weight", "image_encoder.pos_emb", "wrapped.clip_embed.1.weight"):
        assert not torch.equal(state[key], initial[key]), key


def test_latent_standardization_ignores_repetition_and_floors_constant_dimensions():
    from shap_e.train.run import latent_standardization

    latents = torch.cat([torch.randn(10, 3, generator=torch.Generator().manual_seed(0)), torch.ones(10, 1)], 1)
    once = latent_standardization(latents)
    repeated = latent_standardization(latents.repeat_interleave(8, dim=0))
    assert once == repeated
    assert once["channel_scales"][3] == pytest.approx(1e3)  # std 0 floored at min_std
    assert once["channel_biases"][3] == pytest.approx(-1e3)


def test_condition_noise_zero_leaves_the_batches_of_a_run_without_it():
    plain = diffusion_batch_fn(tiny_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5)(3, 0, 1)
    zero = diffusion_batch_fn(tiny_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5, condition_noise=0.0)(3, 0, 1)
    for name in ("x_start", "t", "noise", "conditions", "keep"):
        assert torch.equal(getattr(plain, name), getattr(zero, name)), name


def plain_and_augmented(data, batch_size, cond_drop_prob, **augmentation):
    """Step 3's batch without and with an augmentation; checks that the augmented one is seeded and
    draws the same rows, dropout and noise as the plain one."""
    plain = diffusion_batch_fn(data, 64, batch_size=batch_size, seed=1, cond_drop_prob=cond_drop_prob)(3, 0, 1)
    augmented_fn = diffusion_batch_fn(data, 64, batch_size=batch_size, seed=1, cond_drop_prob=cond_drop_prob,
                                      **augmentation)
    augmented, again = augmented_fn(3, 0, 1), augmented_fn(3, 0, 1)
    assert torch.equal(augmented.conditions, again.conditions)
    assert torch.equal(augmented.keep, plain.keep) and torch.equal(augmented.noise, plain.noise)
    return plain, augmented


def test_condition_noise_perturbs_kept_embeddings_keeps_their_norm_and_is_seeded():
    plain, noisy = plain_and_augmented(tiny_dataset(), 8, 0.5, condition_noise=0.05)
    kept = noisy.keep
    assert 0 < kept.sum() < 8
    assert torch.allclose(noisy.conditions[kept].norm(dim=1), torch.ones(int(kept.sum())), atol=1e-5)
    assert torch.all(noisy.conditions[~kept] == 0)  # CFG-dropped rows stay the unconditional zeros
    cosine = (noisy.conditions[kept] * plain.conditions[kept]).sum(dim=1)
    assert torch.all(cosine < 0.9999) and torch.all(cosine > 0.5)  # moved, but near the caption


def test_condition_noise_rejects_negative_values_and_pixel_conditions():
    with pytest.raises(ValueError, match="condition_noise=-0.1"):
        diffusion_batch_fn(tiny_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5, condition_noise=-0.1)
    with pytest.raises(ValueError, match="condition_noise applies to embedding"):
        diffusion_batch_fn(tiny_pixel_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5, condition_noise=0.1)


def tiny_grid_dataset():
    g = torch.Generator().manual_seed(0)
    return LatentDataset(torch.tanh(torch.randn(4, 32, generator=g)), torch.randn(4, 3, 6, generator=g))


def test_token_dropout_zeroes_whole_tokens_of_kept_rows_and_is_seeded():
    data = tiny_grid_dataset()
    plain, dropped = plain_and_augmented(data, 16, 0.25, token_dropout=0.3)
    kept = dropped.keep
    zero_tokens = (dropped.conditions[kept] == 0).all(dim=1)  # [kept rows, tokens]: a whole column is zero
    same_tokens = (dropped.conditions[kept] == plain.conditions[kept]).all(dim=1)
    assert torch.all(zero_tokens | same_tokens)  # every token is either kept as it was or zeroed
    assert 0.1 < zero_tokens.float().mean() < 0.5
    assert torch.all(dropped.conditions[~kept] == 0)
    unchanged = diffusion_batch_fn(data, 64, batch_size=16, seed=1, cond_drop_prob=0.25, token_dropout=0.0)(3, 0, 1)
    assert torch.equal(unchanged.conditions, plain.conditions) and torch.equal(unchanged.t, plain.t)


def test_token_dropout_needs_grid_conditions_and_a_probability_below_one():
    with pytest.raises(ValueError, match="token_dropout=1.0"):
        diffusion_batch_fn(tiny_grid_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5, token_dropout=1.0)
    with pytest.raises(ValueError, match="token_dropout applies to grid conditions"):
        diffusion_batch_fn(tiny_dataset(), 64, batch_size=8, seed=1, cond_drop_prob=0.5, token_dropout=0.1)
