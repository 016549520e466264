"""NeRF heads derived from the SDF and STF colour heads: the arithmetic, the bundled decoder's heads,
NeRF views that agree with STF views, and the training config that writes them."""
import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from shap_e.models.nerstf.derived_heads import (
    DEFAULT_DENSITY_SCALE,
    NerfHeadSettings,
    derive_nerf_heads_in_state,
    derived_last_layer,
)

LAST = "renderer.nerstf.mlp.6"


def test_nerf_rows_are_written_from_the_sdf_and_stf_colour_rows_and_the_rest_stays_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(12, 8, generator=g), torch.randn(12, generator=g)
    new_weight, new_bias = derived_last_layer(weight, bias, NerfHeadSettings(density_scale=50.0))
    for rows in (slice(0, 1), slice(3, 6)):  # SDF and STF colour
        assert torch.equal(new_weight[rows], weight[rows]) and torch.equal(new_bias[rows], bias[rows])
    for row in (1, 2):  # coarse and fine density
        assert torch.equal(new_weight[row], 50.0 * weight[0]) and torch.equal(new_bias[row], 50.0 * bias[0])
    for rows in (slice(6, 9), slice(9, 12)):  # coarse and fine NeRF colour
        assert torch.equal(new_weight[rows], weight[3:6]) and torch.equal(new_bias[rows], bias[3:6])
    assert not torch.equal(weight[1], new_weight[1])  # the inputs are not modified in place


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), float("inf"), True, "1000"])
def test_a_bad_density_scale_is_refused(scale):
    with pytest.raises(ValueError, match="density_scale"):
        NerfHeadSettings(density_scale=scale)


def test_a_state_without_a_nerstf_mlp_is_refused():
    with pytest.raises(ValueError, match="no NeRSTF MLP"):
        derive_nerf_heads_in_state({"encoder.x": torch.zeros(1)}, NerfHeadSettings())


def test_the_bundled_transmitter_small_carries_derived_nerf_heads():
    from shap_e.models.registry import WEIGHTS_DIR

    state = load_file(str(WEIGHTS_DIR / "transmitter-small.safetensors"))
    weight, bias = state[f"{LAST}.weight"], state[f"{LAST}.bias"]
    expected_weight, expected_bias = derived_last_layer(weight, bias, NerfHeadSettings())
    assert torch.equal(weight, expected_weight) and torch.equal(bias, expected_bias)
    assert DEFAULT_DENSITY_SCALE == 1000.0


@pytest.mark.slow
def test_nerf_and_stf_turntables_of_a_latent_agree(tmp_path):
    """The two render modes of the bundled decoder show the same object: a mean level difference of
    about 6 of 255 at 64 px (docs/findings/transmitter-small.md); here 4 views at 32 px."""
    from shap_e.data import generate_asset
    from shap_e.encoding import encode
    from shap_e.models.decode import decode_latent_images
    from shap_e.models.download import load_model
    from shap_e.rendering.cameras import turntable_cameras

    xm = load_model("transmitter-small", device="cpu")
    path = tmp_path / "mushroom.ply"
    generate_asset("mushroom", "red", seed=0).mesh.export(path)
    latent = encode(str(path), xm)
    cameras = turntable_cameras(32, 4)
    stf = np.stack([np.asarray(im, dtype=np.float32) for im in decode_latent_images(xm, latent, cameras, "stf")])
    nerf = np.stack([np.asarray(im, dtype=np.float32) for im in decode_latent_images(
        xm, latent, cameras, "nerf", generator=torch.Generator().manual_seed(0))])
    assert nerf.mean() > 0.5 * stf.mean()  # not the black frames of untrained heads
    assert np.abs(nerf - stf).mean() < 12
    silhouettes = (nerf.max(-1) > 10) != (stf.max(-1) > 10)
    assert silhouettes.mean() < 0.05


def test_a_transmitter_config_with_nerf_heads_exports_derived_heads(tmp_path, points_only_transmitter):
    from shap_e.cli import main
    from shap_e.data import write_dataset

    write_dataset(tmp_path / "assets", n=1, seed=0)
    config = {
        "model": points_only_transmitter(), "data": str(tmp_path / "assets"), "cache_dir": str(tmp_path / "cache"),
        "point_candidates": 4096, "targets": {"n_near": 256, "n_uniform": 128, "n_color": 128},
        "assets_per_step": 1, "n_sdf": 64, "n_color": 32, "n_rays": 0, "nerf_heads": {"density_scale": 20.0},
        "train": {"steps": 1, "lr": 1e-3, "out_dir": str(tmp_path / "run"), "progress": False},
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "transmitter", "--config", str(tmp_path / "t.yaml")]) == 0
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    last = max(int(k.split(".")[-2]) for k in state if k.startswith("renderer.nerstf.mlp."))
    weight, bias = state[f"renderer.nerstf.mlp.{last}.weight"], state[f"renderer.nerstf.mlp.{last}.bias"]
    assert torch.equal(weight[1], 20.0 * weight[0]) and torch.equal(weight[9:12], weight[3:6])
    assert torch.equal(bias[1], 20.0 * bias[0]) and torch.equal(bias[9:12], bias[3:6])


def test_a_bad_nerf_heads_setting_is_refused_before_training(tmp_path, points_only_transmitter):
    from shap_e.train.run import transmitter_settings

    config = {"model": points_only_transmitter(), "data": str(tmp_path), "nerf_heads": {"density_scal": 5}}
    with pytest.raises(ValueError, match="density_scal"):
        transmitter_settings(config)
