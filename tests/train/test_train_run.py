"""`shap-e train text --config FILE`: YAML in, safetensors out; init from weights; clear errors."""
import json
import os
import re
import stat

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from shap_e.cli import main
from shap_e.models.configs import model_from_config
from shap_e.train.diffusion_training import LatentDataset

TINY_TEXT = {
    "name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4,
    "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 1, "heads": 2,
              "time_token_cond": True, "token_cond": True, "use_pos_emb": True, "cond_width": 16},
}

# a tiny prior over 16 x 3 caption token grids (`conditioner: minilm_tokens`)
TOKEN_PRIOR = {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "minilm_tokens",
               "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 32, "layers": 1,
                         "heads": 2, "grid_channels": 16, "grid_tokens": 3}}


def assert_same_weights(path_a, path_b):
    """Two safetensors files hold the same tensors, bit for bit."""
    a, b = load_file(str(path_a)), load_file(str(path_b))
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


def write_config(tmp_path, **overrides):
    g = torch.Generator().manual_seed(0)
    LatentDataset(torch.tanh(torch.randn(6, 32, generator=g)), torch.randn(6, 16, generator=g)).save(
        tmp_path / "latents.safetensors"
    )
    config = {
        "model": TINY_TEXT,
        "diffusion": {"schedule": "exp", "timesteps": 32, "mean_type": "x_start"},
        "data": str(tmp_path / "latents.safetensors"),
        "batch_size": 4,
        "train": {"steps": 4, "lr": 1e-3, "out_dir": str(tmp_path / "run"), "progress": False},
    }
    config.update(overrides)
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_train_command_writes_loadable_weights_and_metrics(tmp_path):
    previous = os.umask(0o022)
    try:
        assert main(["train", "text", "--config", str(write_config(tmp_path))]) == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "run" / "model.safetensors").stat().st_mode) == 0o644
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    model_from_config(TINY_TEXT).load_state_dict(state, strict=True)
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


def test_forward_threads_flag_reaches_the_run_and_is_logged(tmp_path):
    assert main(["train", "text", "--config", str(write_config(tmp_path)), "--forward-threads", "2"]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["environment"]["forward_threads"] == 2
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["config"]["forward_threads"] == 2


def test_stop_at_writes_no_weights_and_the_resumed_run_gives_the_straight_runs(tmp_path, capsys):
    for run in "ab":
        (tmp_path / run).mkdir()
    straight = write_config(tmp_path / "a")
    assert main(["train", "text", "--config", str(straight)]) == 0
    halves = write_config(tmp_path / "b")
    assert main(["train", "text", "--config", str(halves), "--stop-at", "2"]) == 0
    assert "continue with --resume" in capsys.readouterr().err
    assert not (tmp_path / "b" / "run" / "model.safetensors").exists()
    assert torch.load(tmp_path / "b" / "run" / "checkpoint.pt", weights_only=True)["step"] == 2
    assert main(["train", "text", "--config", str(halves), "--resume", "--forward-threads", "2"]) == 0
    assert_same_weights(tmp_path / "a" / "run" / "model.safetensors", tmp_path / "b" / "run" / "model.safetensors")


def test_a_bad_stop_at_is_refused_before_a_runner_prepares_or_writes_anything(tmp_path, points_only_transmitter):
    from shap_e.data import write_dataset
    from shap_e.train.run import train_diffusion, train_transmitter

    with pytest.raises(ValueError, match="stop_at=0 must be at least 1"):
        train_diffusion("text", yaml.safe_load(write_config(tmp_path).read_text()), stop_at=0)
    assert not (tmp_path / "run").exists()
    write_dataset(tmp_path / "assets", n=2, seed=0)
    with pytest.raises(ValueError, match="stop_at=-1 must be at least 1"):
        train_transmitter(transmitter_config(tmp_path, points_only_transmitter, "bad"), stop_at=-1)
    assert not (tmp_path / "cache_bad").exists() and not (tmp_path / "run_bad").exists()


@pytest.mark.slow
def test_train_command_under_torchrun_trains_one_model_on_two_processes(tmp_path, torchrun):
    torchrun("-m", "shap_e", "train", "text", "--config", str(write_config(tmp_path)))
    model_from_config(TINY_TEXT).load_state_dict(load_file(str(tmp_path / "run" / "model.safetensors")), strict=True)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["environment"]["world_size"] == 2
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["step"] == 4


def test_train_starts_from_given_weights(tmp_path):
    torch.manual_seed(5)
    start = model_from_config(TINY_TEXT).state_dict()
    save_file({k: v.contiguous() for k, v in start.items()}, str(tmp_path / "init.safetensors"))
    config = write_config(tmp_path, train={"steps": 1, "lr": 1e-12, "out_dir": str(tmp_path / "run"),
                                           "progress": False, "ema_decay": 0.0, "grad_clip": None})
    assert main(["train", "text", "--config", str(config), "--init", str(tmp_path / "init.safetensors")]) == 0
    trained = load_file(str(tmp_path / "run" / "model.safetensors"))
    for key, value in start.items():
        torch.testing.assert_close(trained[key], value, atol=1e-6, rtol=0)


def test_condition_noise_in_the_config_reaches_the_batches(tmp_path):
    train = {"steps": 2, "lr": 1e-3, "progress": False, "ema_decay": 0.0, "seed": 3}
    weights = {}
    for noise in (0.0, 0.2):
        run = tmp_path / f"noise{noise}"
        run.mkdir()
        config = write_config(run, condition_noise=noise, train=dict(train, out_dir=str(run / "run")))
        assert main(["train", "text", "--config", str(config)]) == 0
        weights[noise] = load_file(str(run / "run" / "model.safetensors"))
    key = "wrapped.clip_embed.weight"
    assert not torch.equal(weights[0.0][key], weights[0.2][key])


def test_unknown_training_key_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "text", "--config", str(write_config(tmp_path, bach_size=3))]) == 2
    assert "unknown key(s) ['bach_size']" in capsys.readouterr().err


def test_stage_must_match_the_model_conditioning(tmp_path, capsys):
    assert main(["train", "image", "--config", str(write_config(tmp_path))]) == 2
    assert "needs 'image_grid'" in capsys.readouterr().err


def test_text_stage_trains_a_prior_on_caption_token_grids(tmp_path):
    token_prior = TOKEN_PRIOR
    g = torch.Generator().manual_seed(0)
    LatentDataset(torch.tanh(torch.randn(6, 32, generator=g)), torch.randn(6, 16, 3, generator=g)).save(
        tmp_path / "grids.safetensors"
    )
    weights = {}
    for dropout in (0.0, 0.5):  # token_dropout (word dropout) in the config reaches the batches
        run = tmp_path / f"dropout{dropout}"
        config = write_config(tmp_path, model=token_prior, data=str(tmp_path / "grids.safetensors"),
                              token_dropout=dropout, train={"steps": 2, "lr": 1e-3, "out_dir": str(run),
                                                            "progress": False, "ema_decay": 0.0})
        assert main(["train", "text", "--config", str(config)]) == 0
        weights[dropout] = load_file(str(run / "model.safetensors"))
        model_from_config(token_prior).load_state_dict(weights[dropout], strict=True)
    key = "wrapped.clip_embed.1.weight"
    assert not torch.equal(weights[0.0][key], weights[0.5][key])


@pytest.mark.parametrize("made, reads, message", [
    (None, [0], "read from MiniLM's last layer, but the model config says text_layers: [0]"),
    ("0", None, "read from MiniLM's hidden states 0, but the model config says text_layers: None"),
    ("0,6", [6, 0], "read from MiniLM's hidden states 0,6, but the model config says text_layers: [6, 0]"),
])
def test_latents_read_from_other_minilm_layers_than_the_prior_are_refused(tmp_path, capsys, made, reads, message):
    token_prior = dict(TOKEN_PRIOR, text_layers=reads)
    provenance = {"stage": "text"} if made is None else {"stage": "text", "text_layers": made}
    LatentDataset(torch.zeros(4, 32), torch.zeros(4, 16, 3), provenance).save(tmp_path / "grids.safetensors")
    config = write_config(tmp_path, model=token_prior, data=str(tmp_path / "grids.safetensors"))
    assert main(["train", "text", "--config", str(config)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_latents_without_a_provenance_are_not_checked_for_minilm_layers(tmp_path):
    token_prior = dict(TOKEN_PRIOR, text_layers=[0])
    LatentDataset(torch.zeros(4, 32), torch.zeros(4, 16, 3)).save(tmp_path / "grids.safetensors")
    config = write_config(tmp_path, model=token_prior, data=str(tmp_path / "grids.safetensors"),
                          train={"steps": 1, "out_dir": str(tmp_path / "run"), "progress": False})
    assert main(["train", "text", "--config", str(config)]) == 0
    assert (tmp_path / "run" / "model.safetensors").exists()


def test_a_bad_world_size_from_the_launcher_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    assert main(["train", "text", "--config", str(write_config(tmp_path))]) == 2
    assert "environment variable WORLD_SIZE must be a whole number, got 'two'" in capsys.readouterr().err
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_missing_config_file_is_reported(tmp_path, capsys):
    assert main(["train", "text", "--config", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml" in capsys.readouterr().err


@pytest.mark.slow
def test_train_transmitter_command_on_a_folder_of_meshes(tmp_path, golden):
    from shap_e.data import write_dataset

    write_dataset(tmp_path / "assets", n=2, seed=0)
    config = {
        "model": golden("e")["config"],
        "data": str(tmp_path / "assets"),
        "cache_dir": str(tmp_path / "cache"),
        "assets_per_step": 1, "n_sdf": 128, "n_color": 64, "n_rays": 16,
        "train": {"steps": 2, "lr": 1e-4, "out_dir": str(tmp_path / "run"), "progress": False},
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "transmitter", "--config", str(tmp_path / "t.yaml")]) == 0
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    model_from_config(golden("e")["config"]).load_state_dict(state, strict=True)


@pytest.mark.slow
def test_freeze_decoder_trains_the_encoder_alone(tmp_path, golden):
    from shap_e.data import write_dataset
    from shap_e.train.run import train_transmitter

    write_dataset(tmp_path / "assets", n=2, seed=0)
    init = {k: v.contiguous() for k, v in golden("e")["state_dict"].items()}
    save_file(init, str(tmp_path / "init.safetensors"))
    config = {
        "model": golden("e")["config"], "data": str(tmp_path / "assets"), "cache_dir": str(tmp_path / "cache"),
        "init": str(tmp_path / "init.safetensors"), "freeze_decoder": True,
        "assets_per_step": 1, "n_sdf": 128, "n_color": 64, "n_rays": 16,
        "train": {"steps": 3, "lr": 1e-3, "out_dir": str(tmp_path / "run"), "progress": False},
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "transmitter", "--config", str(tmp_path / "t.yaml")]) == 0
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    decoder = [k for k in init if k.startswith(("encoder.params_proj.", "renderer."))]
    assert decoder and all(torch.equal(state[k], init[k]) for k in decoder)
    assert any(not torch.equal(state[k], init[k]) for k in init if k not in decoder)
    # A decoder kept without initial weights would stay random: refused before any work.
    del config["init"]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="freeze_decoder: true needs `init`"):
        train_transmitter(config)


def test_every_recipe_uses_only_keys_its_stage_accepts():
    from pathlib import Path

    from shap_e.util.config import check_keys
    from shap_e.train.loop import TrainConfig
    from shap_e.train.run import DIFFUSION_KEYS, TRANSMITTER_KEYS, read_training_config

    recipes = sorted(Path(__file__).resolve().parents[2].joinpath("recipes").glob("*.yaml"))
    assert {p.name for p in recipes} >= {"transmitter-small.yaml", "transmitter-small-encoder.yaml",
                                         "transmitter-small-encoder-2.yaml", "text-small.yaml", "image-small.yaml"}
    for path in recipes:
        config = read_training_config(path)
        keys = TRANSMITTER_KEYS if path.name.startswith("transmitter") else DIFFUSION_KEYS
        check_keys(config, keys, path.name)
        TrainConfig(**config["train"])  # unknown or invalid optimisation settings raise here


def test_a_config_that_extends_another_keeps_the_base_settings_it_does_not_change(tmp_path):
    from shap_e.train.run import read_training_config

    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "a.yaml").write_text(yaml.safe_dump(
        {"data": "d", "n_sdf": 8, "train": {"lr": 1e-3, "steps": 10, "seed": 0}}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(
        {"extends": "base/a.yaml", "n_sdf": 16, "train": {"lr": 5e-4}}))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"extends": "b.yaml", "train": {"seed": 3}}))
    assert read_training_config(tmp_path / "c.yaml") == {
        "data": "d", "n_sdf": 16, "train": {"lr": 5e-4, "steps": 10, "seed": 3}}


def test_extends_naming_a_missing_file_or_forming_a_cycle_is_a_clear_error(tmp_path):
    from shap_e.train.run import read_training_config

    (tmp_path / "a.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        read_training_config(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("extends: c.yaml\n")
    (tmp_path / "c.yaml").write_text("extends: b.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        read_training_config(tmp_path / "b.yaml")
    (tmp_path / "d.yaml").write_text("extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ValueError, match="extends must be the path of one config file"):
        read_training_config(tmp_path / "d.yaml")


def test_stage_1c_recipe_differs_from_stage_1b_only_in_start_learning_rate_seed_output_and_nerf_heads():
    from pathlib import Path

    from shap_e.train.run import read_training_config

    recipes = Path(__file__).resolve().parents[2] / "recipes"
    stage_1b = read_training_config(recipes / "transmitter-small-encoder.yaml")
    stage_1c = read_training_config(recipes / "transmitter-small-encoder-2.yaml")
    changed = {k for k in stage_1b if stage_1b[k] != stage_1c[k]}
    assert stage_1c.keys() - stage_1b.keys() == {"nerf_heads"} and stage_1c["nerf_heads"] == {}
    assert stage_1b.keys() <= stage_1c.keys() and changed == {"init", "train"}
    assert stage_1c["init"] == "runs/small/transmitter_encoder/model.safetensors"
    assert {k: v for k, v in stage_1c["train"].items() if stage_1b["train"][k] != v} == {
        "lr": 2.5e-4, "seed": 3, "out_dir": "runs/small/transmitter_encoder_2"}


def test_normalize_latents_writes_the_standardising_diffusion_config(tmp_path):
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config

    assert main(["train", "text", "--config", str(write_config(tmp_path, normalize_latents=True))]) == 0
    written = yaml.safe_load((tmp_path / "run" / "diffusion.yaml").read_text())
    assert written["schedule"] == "exp" and len(written["channel_scales"]) == 32
    latents = LatentDataset.load(tmp_path / "latents.safetensors").latents
    standardised = diffusion_from_config(written).scale_channels(latents)
    torch.testing.assert_close(standardised.mean(0), torch.zeros(32), atol=1e-5, rtol=0)
    torch.testing.assert_close(standardised.std(0, unbiased=False), torch.ones(32), atol=1e-4, rtol=0)


def test_without_normalize_latents_the_diffusion_config_is_written_unchanged(tmp_path):
    assert main(["train", "text", "--config", str(write_config(tmp_path))]) == 0
    written = yaml.safe_load((tmp_path / "run" / "diffusion.yaml").read_text())
    assert written == {"schedule": "exp", "timesteps": 32, "mean_type": "x_start"}
    # The run folder also names its data (and the data's provenance, none for this hand-made file).
    assert yaml.safe_load((tmp_path / "run" / "dataset.yaml").read_text()) == {"data": str(tmp_path / "latents.safetensors")}


def test_is_config_file_tells_yaml_paths_from_registry_names(tmp_path):
    from shap_e.train.run import is_config_file, read_config

    assert is_config_file("recipes/image-small.yaml") and is_config_file(tmp_path / "t.yml")
    assert not is_config_file("transmitter-small") and not is_config_file({"name": "x"})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"name": "from-file"}))
    assert read_config(tmp_path / "c.yaml") == {"name": "from-file"}
    assert read_config("diffusion-small")["schedule"] == "cosine"  # a registry name goes to load_config


def transmitter_config(tmp_path, points_only_transmitter, name: str) -> dict:
    return {
        "model": points_only_transmitter(), "data": str(tmp_path / "assets"),
        "cache_dir": str(tmp_path / f"cache_{name}"), "point_candidates": 4096, "data_workers": 2,
        "targets": {"n_near": 256, "n_uniform": 128, "n_color": 128},
        "assets_per_step": 2, "n_sdf": 64, "n_color": 32, "n_rays": 0,
        "train": {"steps": 2, "lr": 1e-3, "seed": 1, "out_dir": str(tmp_path / f"run_{name}"), "progress": False},
    }


def cache_files(folder):
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_prepared_data_is_read_from_the_cache_and_trains_the_same_weights(tmp_path, points_only_transmitter):
    from shap_e.data import write_dataset

    write_dataset(tmp_path / "assets", n=2, seed=0)
    own = transmitter_config(tmp_path, points_only_transmitter, "own")
    prepared = transmitter_config(tmp_path, points_only_transmitter, "prepared")
    for name, config in (("own", own), ("prepared", prepared)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "transmitter", "--config", str(tmp_path / "prepared.yaml"), "--prepare-only",
                 "--data-workers", "1"]) == 0
    cached = cache_files(tmp_path / "cache_prepared")
    assert len(cached) == 4  # an encoder batch and the supervision per asset
    assert main(["train", "transmitter", "--config", str(tmp_path / "prepared.yaml")]) == 0
    assert cache_files(tmp_path / "cache_prepared") == cached  # read, not computed again
    assert main(["train", "transmitter", "--config", str(tmp_path / "own.yaml")]) == 0
    assert_same_weights(tmp_path / "run_own" / "model.safetensors", tmp_path / "run_prepared" / "model.safetensors")


def straight_and_halves_configs(tmp_path, points_only_transmitter) -> dict:
    """Two 4-step transmitter configs on two assets, "straight" and "halves" (to be stopped and resumed)."""
    from shap_e.data import write_dataset

    write_dataset(tmp_path / "assets", n=2, seed=0)
    paths = {}
    for name in ("straight", "halves"):
        config = transmitter_config(tmp_path, points_only_transmitter, name)
        config["train"]["steps"] = 4
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(config))
    return paths


def test_a_transmitter_run_stopped_and_resumed_gives_the_straight_runs_weights(tmp_path, points_only_transmitter):
    # The encoder's shuffles draw from torch's global generator; the checkpoint carries its state.
    paths = straight_and_halves_configs(tmp_path, points_only_transmitter)
    assert main(["train", "transmitter", "--config", str(paths["straight"])]) == 0
    assert main(["train", "transmitter", "--config", str(paths["halves"]), "--stop-at", "2"]) == 0
    assert not (tmp_path / "run_halves" / "model.safetensors").exists()
    assert main(["train", "transmitter", "--config", str(paths["halves"]), "--resume", "--forward-threads", "2"]) == 0
    assert_same_weights(tmp_path / "run_straight" / "model.safetensors", tmp_path / "run_halves" / "model.safetensors")


@pytest.mark.slow
def test_transmitter_under_torchrun_prepares_a_share_per_rank_and_trains_on_two(tmp_path, torchrun,
                                                                               points_only_transmitter):
    from shap_e.data import write_dataset

    write_dataset(tmp_path / "assets", n=2, seed=0)
    config = transmitter_config(tmp_path, points_only_transmitter, "ddp")
    config["train"]["progress"] = True  # the progress bars say which assets each rank prepared
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    stderr = torchrun("-m", "shap_e", "train", "transmitter", "--config", str(tmp_path / "t.yaml"))
    assert len(cache_files(tmp_path / "cache_ddp")) == 4
    for rank, log in enumerate(stderr):  # each rank prepared one asset into the cache, then read both
        assert re.search(rf"assets \(rank {rank}'s share\): 100%.*\| 1/1 ", log), log
        assert re.search(r"assets: 100%.*\| 2/2 ", log), log
    records = [json.loads(line) for line in (tmp_path / "run_ddp" / "metrics.jsonl").read_text().splitlines()]
    assert records[0] == {"step": 0, "assets": 2, "skipped_assets": 0}
    assert records[1]["environment"]["world_size"] == 2
    assert load_file(str(tmp_path / "run_ddp" / "model.safetensors"))


@pytest.mark.slow
def test_a_transmitter_run_under_torchrun_stopped_and_resumed_gives_the_straight_runs_weights(
        tmp_path, torchrun, points_only_transmitter):
    # Each rank shuffles its share's points with torch's global generator; the checkpoint keeps rank 0's
    # state and every rank restores it, which is exact because the ranks draw from it alike.
    paths = straight_and_halves_configs(tmp_path, points_only_transmitter)
    train = ("-m", "shap_e", "train", "transmitter", "--config")
    torchrun(*train, str(paths["straight"]))
    torchrun(*train, str(paths["halves"]), "--stop-at", "2")
    assert not (tmp_path / "run_halves" / "model.safetensors").exists()
    torchrun(*train, str(paths["halves"]), "--resume")
    assert_same_weights(tmp_path / "run_straight" / "model.safetensors", tmp_path / "run_halves" / "model.safetensors")


def test_preparing_needs_no_init_weights_but_a_cache(tmp_path, points_only_transmitter):
    from shap_e.data import write_dataset
    from shap_e.train.run import prepare_transmitter_data

    write_dataset(tmp_path / "assets", n=1, seed=0)
    config = dict(transmitter_config(tmp_path, points_only_transmitter, "a"), data_workers=1)
    # a later stage's data is prepared before the stage that writes its init weights has finished
    config.update(init=str(tmp_path / "not_written_yet.safetensors"), freeze_decoder=True)
    assert prepare_transmitter_data(config) == (1, 0)
    assert len(list((tmp_path / "cache_a").iterdir())) == 2
    with pytest.raises(ValueError, match="needs `cache_dir`"):
        prepare_transmitter_data({k: v for k, v in config.items() if k != "cache_dir"})


@pytest.mark.parametrize("args, message", [
    (["train", "text", "--prepare-only"], "for the transmitter stage"),
    (["train", "transmitter", "--data-workers", "0"], "--data-workers must be at least 1"),
    (["train", "transmitter", "--prepare-only", "--resume"], "leave out --resume"),
    (["train", "text", "--forward-threads", "0"], "--forward-threads must be at least 1"),
    (["train", "text", "--stop-at", "0"], "--stop-at must be at least 1"),
    (["train", "transmitter", "--prepare-only", "--stop-at", "5"], "leave out --resume and --stop-at"),
])
def test_train_flags_misused_are_one_line_errors(tmp_path, capsys, args, message):
    assert main([*args, "--config", str(write_config(tmp_path))]) != 0
    assert message in capsys.readouterr().err


def test_latents_read_the_encoder_batches_that_transmitter_preparation_cached(tmp_path, points_only_transmitter):
    from shap_e.data import write_dataset
    from shap_e.train.latents import encode_assets, read_assets
    from shap_e.train.run import prepare_transmitter_data

    write_dataset(tmp_path / "assets", n=2, seed=0)
    config = dict(transmitter_config(tmp_path, points_only_transmitter, "a"), data_workers=1, point_candidates=2**14)
    config["train"]["seed"] = 0  # the recipe's stage 1: the latents' seed and point count
    prepare_transmitter_data(config)
    cached = cache_files(tmp_path / "cache_a")
    torch.manual_seed(0)
    transmitter = model_from_config(points_only_transmitter()).eval()
    paths = [r["path"] for r in read_assets(tmp_path / "assets")]
    from_cache = encode_assets(transmitter, paths, 0, False, cache_dir=tmp_path / "cache_a")
    assert cache_files(tmp_path / "cache_a") == cached  # no batch computed again
    assert torch.equal(from_cache, encode_assets(transmitter, paths, 0, False))
    encode_assets(transmitter, paths, 0, False, cache_dir=tmp_path / "empty_cache")
    assert len(list((tmp_path / "empty_cache").iterdir())) == 2  # the cache is used: one batch per asset
