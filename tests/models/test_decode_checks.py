"""What `decode_latent_images` / `decode_latent_mesh` refuse, and that they work on what they accept:
no black NeRF turntables from a model without NeRF heads, no NaN in, no grid that cannot fit."""
import numpy as np
import pytest
import torch

from shap_e.models.decode import decode_latent_images, decode_latent_mesh, latent_color_fn, turntable
from shap_e.models.download import load_model
from shap_e.rendering.cameras import turntable_cameras
from shap_e.util.errors import InvalidArgumentError, NonFiniteError, ResourceLimitError


@pytest.fixture(scope="module")
def xm_and_latent(tmp_path_factory):
    import trimesh

    from shap_e.encoding import encode

    asset = tmp_path_factory.mktemp("asset") / "box.ply"
    box = trimesh.creation.box(extents=(1.2, 0.8, 0.6))
    box.visual.vertex_colors = np.tile([200, 40, 40, 255], (len(box.vertices), 1))
    box.export(asset)
    xm = load_model("transmitter-small")
    return xm, encode(asset, xm, generator=torch.Generator().manual_seed(0))


def test_a_model_without_trained_nerf_heads_refuses_nerf_views_naming_stf(xm_and_latent, monkeypatch):
    import dataclasses

    from shap_e.models import registry

    _, latent = xm_and_latent
    spec = registry.MODELS["transmitter-small"]
    monkeypatch.setitem(registry.MODELS, "transmitter-small", dataclasses.replace(spec, render_modes=("stf",)))
    xm = load_model("transmitter-small")
    cameras = turntable_cameras(16, 2, torch.device("cpu"))
    with pytest.raises(InvalidArgumentError, match=r"^transmitter-small has no trained NeRF heads .*render it with "
                                                   r"stf \(rendering_mode='stf'"):
        decode_latent_images(xm, latent, cameras, rendering_mode="nerf")
    assert len(decode_latent_images(xm, latent, cameras, rendering_mode="stf")) == 2


@pytest.mark.parametrize("mode", ["stf", "nerf"])
def test_the_bundled_transmitter_renders_visible_turntables_in_both_modes(xm_and_latent, mode):
    xm, latent = xm_and_latent
    assert mode in xm.registry_spec.render_modes
    frames = decode_latent_images(xm, latent, turntable_cameras(32, 4, torch.device("cpu")), rendering_mode=mode,
                                  generator=torch.Generator().manual_seed(0))
    levels = [np.asarray(frame).mean() for frame in frames]
    assert min(levels) > 10, levels  # the object covers part of every frame (a black frame is ~0)


def test_non_finite_latents_are_refused_and_half_precision_is_cast(xm_and_latent):
    xm, latent = xm_and_latent
    bad = latent.clone()
    bad[5] = float("nan")
    with pytest.raises(NonFiniteError, match="latent holds 1 NaN or infinite values"):
        decode_latent_mesh(xm, bad, grid_size=16)
    with pytest.raises(InvalidArgumentError, match="holds int64 numbers"):
        decode_latent_mesh(xm, latent.long(), grid_size=16)
    half = decode_latent_mesh(xm, latent.half(), grid_size=16)
    assert len(half.faces) > 0 and torch.isfinite(half.verts).all()


def test_a_grid_that_cannot_fit_in_memory_is_refused_before_any_work(xm_and_latent):
    from shap_e.util.memory import available_memory

    xm, latent = xm_and_latent
    free = available_memory()
    if free is None or free > 160 * 4096**3:
        pytest.skip("this computer has the memory for a 4096 grid")
    with pytest.raises(ResourceLimitError, match=r"^grid_size 4096 needs about .* of memory but only .* is free; "
                                                 r"use grid_size \d+ or less"):
        decode_latent_mesh(xm, latent, grid_size=4096)
    with pytest.raises(InvalidArgumentError, match=r"grid_size must be an integer in \[8, 4096\], got 100000"):
        decode_latent_mesh(xm, latent, grid_size=100000)


def test_large_grids_show_a_progress_bar(xm_and_latent, capsys, monkeypatch):
    import shap_e.models.decode as decode

    xm, latent = xm_and_latent
    monkeypatch.setattr(decode, "PROGRESS_GRID_SIZE", 16)
    decode_latent_mesh(xm, latent, grid_size=16)
    assert "decoding (grid 16)" in capsys.readouterr().err


def test_the_texture_field_of_a_sampled_latent_needs_no_gradients(xm_and_latent):
    """`--texture` used to fail with "Inference tensors cannot be saved for backward": sampled
    latents are inference tensors."""
    xm, latent = xm_and_latent
    with torch.inference_mode():
        sampled = latent.clone()
    colors = latent_color_fn(xm, sampled)(torch.zeros(5, 3))
    assert colors.shape == (5, 3) and torch.isfinite(colors).all()


def test_turntable_sizes_are_checked(xm_and_latent):
    xm, latent = xm_and_latent
    with pytest.raises(ResourceLimitError, match="rendering 360 views of 100000 pixels needs about"):
        turntable(xm, latent, size=100000, n_views=360, rendering_mode="stf")
