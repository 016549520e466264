"""Refitting an image prior's latent head on its frozen encoder after the diffusion training."""
import json
import time

import pytest
import torch
from safetensors.torch import load_file

from shap_e.models.configs import model_from_config
from shap_e.train.head_refit import HeadRefitConfig, encoder_grids, refit_latent_head
from shap_e.train.run import train_diffusion
from test_diffusion_training import TINY_DIFFUSION, TINY_IMAGE, TINY_TEXT, tiny_dataset, tiny_pixel_dataset

WITH_HEAD = dict(TINY_IMAGE, latent_head=True)


def tiny_prior():
    torch.manual_seed(0)
    return model_from_config(WITH_HEAD).eval()


def head_error(prior, dataset) -> float:
    with torch.no_grad():
        return float((prior.latent_head(encoder_grids(prior.image_encoder, dataset.conditions))
                      - dataset.latents).pow(2).mean())


def test_the_refit_head_reads_the_latents_better_and_leaves_the_encoder_alone():
    dataset = tiny_pixel_dataset(torch.uint8)
    prior = tiny_prior()
    encoder = {k: v.clone() for k, v in prior.image_encoder.state_dict().items()}
    before = head_error(prior, dataset)
    last = refit_latent_head(prior, dataset.conditions, dataset.latents,
                             HeadRefitConfig(steps=200, batch_size=8, lr=3e-3), progress=False)
    after = head_error(prior, dataset)
    assert after < 0.2 * before and abs(last - after) < 0.5 * before
    for key, value in prior.image_encoder.state_dict().items():
        assert torch.equal(value, encoder[key]), key


def test_the_refit_is_deterministic_and_logs_its_loss():
    dataset = tiny_pixel_dataset()
    heads, logs = [], []
    for _ in range(2):
        prior, records = tiny_prior(), []
        refit_latent_head(prior, dataset.conditions, dataset.latents,
                          HeadRefitConfig(steps=10, batch_size=4, log_every=4, seed=3), progress=False,
                          log=records.append)
        heads.append(prior.latent_head.state_dict())
        logs.append(records)
    for key, value in heads[0].items():
        torch.testing.assert_close(value, heads[1][key], rtol=0, atol=0)
    assert [r["head_refit_step"] for r in logs[0]] == [4, 8, 10]
    untimed = [[{k: v for k, v in r.items() if k != "seconds"} for r in records] for records in logs]
    assert untimed[0] == untimed[1]


def test_the_refit_logs_the_wall_time_since_it_began():
    dataset = tiny_pixel_dataset()
    records = []
    started = time.monotonic()
    refit_latent_head(tiny_prior(), dataset.conditions, dataset.latents,
                      HeadRefitConfig(steps=10, batch_size=4, log_every=4), progress=False, log=records.append)
    elapsed = time.monotonic() - started
    seconds = [r["seconds"] for r in records]
    assert len(seconds) == 3 and all(isinstance(s, float) for s in seconds)
    assert seconds == sorted(seconds) and 0 <= seconds[0] and seconds[-1] <= elapsed + 0.01


def test_refit_inputs_are_checked():
    dataset = tiny_pixel_dataset()
    with pytest.raises(ValueError, match="latent head"):
        refit_latent_head(model_from_config(TINY_IMAGE), dataset.conditions, dataset.latents, HeadRefitConfig())
    with pytest.raises(ValueError, match="row-aligned"):
        refit_latent_head(tiny_prior(), dataset.conditions[:3], dataset.latents, HeadRefitConfig())
    with pytest.raises(ValueError, match=r"reads pixel pictures \[n, 3, S, S\]; got conditions of shape \[4, 16\]"):
        refit_latent_head(tiny_prior(), dataset.latents[:, :16], dataset.latents, HeadRefitConfig())
    with pytest.raises(ValueError, match="steps, batch_size and log_every"):
        HeadRefitConfig(steps=0)
    with pytest.raises(ValueError, match="lr > 0"):
        HeadRefitConfig(lr=0.0)


def run_config(tmp_path, name, ema_decay=0.0, **extra):
    tiny_pixel_dataset(torch.uint8).save(tmp_path / "pixels.safetensors")
    return {"model": WITH_HEAD, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "pixels.safetensors"),
            "batch_size": 4, "latent_probe": 1.0, **extra,
            "train": {"steps": 3, "lr": 1e-3, "out_dir": str(tmp_path / name), "progress": False,
                      "ema_decay": ema_decay, "seed": 7}}


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_training_with_head_refit_exports_the_refit_head_on_the_trained_encoder(tmp_path, ema_decay):
    refit = {"steps": 30, "batch_size": 4, "log_every": 10}
    plain = load_file(str(train_diffusion("image", run_config(tmp_path, "plain", ema_decay))))
    state = load_file(str(train_diffusion("image", run_config(tmp_path, "refit", ema_decay, head_refit=refit))))
    assert state.keys() == plain.keys()
    for key, value in state.items():  # everything but the head is the plain run's export
        if not key.startswith("latent_head."):
            torch.testing.assert_close(value, plain[key], rtol=0, atol=0)
    # The exported head is what refit_latent_head fits on the exported encoder.
    prior = model_from_config(WITH_HEAD)
    prior.load_state_dict(plain)
    dataset = tiny_pixel_dataset(torch.uint8)
    refit_latent_head(prior, dataset.conditions, dataset.latents, HeadRefitConfig(**refit), progress=False)
    for key, value in prior.latent_head.state_dict().items():
        torch.testing.assert_close(state["latent_head." + key], value, rtol=0, atol=0)
    records = [json.loads(line) for line in (tmp_path / "refit" / "metrics.jsonl").read_text().splitlines()]
    assert [r["head_refit_step"] for r in records if "head_refit_step" in r] == [10, 20, 30]


def test_head_refit_settings_are_checked_before_training(tmp_path):
    with pytest.raises(ValueError, match="unknown.*head_refit|head_refit.*stepz"):
        train_diffusion("image", run_config(tmp_path, "a", head_refit={"stepz": 3}))
    with pytest.raises(ValueError, match="mapping"):
        train_diffusion("image", run_config(tmp_path, "b", head_refit=5))
    no_head = dict(run_config(tmp_path, "c", head_refit={}), model=TINY_IMAGE)
    with pytest.raises(ValueError, match="latent head"):
        train_diffusion("image", no_head)
    tiny_dataset().save(tmp_path / "text.safetensors")
    text = {"model": TINY_TEXT, "diffusion": TINY_DIFFUSION, "data": str(tmp_path / "text.safetensors"),
            "head_refit": {}, "train": {"steps": 1, "out_dir": str(tmp_path / "d"), "progress": False}}
    with pytest.raises(ValueError, match="latent head"):
        train_diffusion("text", text)
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_encoder_grids_read_stored_and_float_pictures_alike_in_any_chunks_and_keep_the_mode():
    prior = tiny_prior().train()
    codes = tiny_pixel_dataset(torch.uint8).conditions  # [4, 3, 16, 16] uint8
    grids = encoder_grids(prior.image_encoder, codes, chunk=3)
    assert grids.shape == (4, 16, 16) and prior.image_encoder.training
    prior.image_encoder.eval()
    with torch.no_grad():
        expected = prior.image_encoder(codes.float() / 127.5 - 1)
    torch.testing.assert_close(grids, expected)
    torch.testing.assert_close(encoder_grids(prior.image_encoder, codes.float() / 127.5 - 1, chunk=1), expected)
