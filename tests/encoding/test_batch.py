"""The Blender-free `load_or_create_multimodal_batch`: batch layout, cache and argument checks."""
import os

import pytest
import torch
import trimesh

from shap_e.encoding import batch as multimodal_batch
from shap_e.encoding.batch import load_or_create_multimodal_batch, load_or_create_multimodal_batches

SMALL = dict(point_count=256, random_sample_count=2048, mv_num_views=3, mv_image_size=16)


@pytest.fixture
def box_path(tmp_path):
    box = trimesh.creation.box(extents=[1.0, 0.5, 0.5])
    box.visual.face_colors = [255, 0, 0, 255]
    box.export(tmp_path / "red.ply")
    return str(tmp_path / "red.ply")


@pytest.fixture
def sphere_path(tmp_path):
    sphere = trimesh.creation.icosphere(subdivisions=2)
    sphere.visual.face_colors = [0, 255, 0, 255]
    sphere.export(tmp_path / "green.glb")
    return str(tmp_path / "green.glb")


def test_batch_has_the_encoder_layout(box_path):
    batch = load_or_create_multimodal_batch("cpu", model_path=box_path, mv_light_mode="basic", **SMALL)
    assert batch.points.shape == (1, 6, 256)
    assert batch.views.shape == (1, 3, 3, 16, 16)
    assert batch.depths.shape == batch.view_alphas.shape == (1, 3, 1, 16, 16)
    assert batch.cameras.shape == (1, 3) and batch.cameras.width == 16
    assert torch.equal(batch.points[0, 3:].T, torch.tensor([1.0, 0.0, 0.0]).expand(256, 3))
    assert batch.points[0, :3].abs().max() <= 1 + 1e-6
    hit = batch.view_alphas.bool()
    assert hit.any() and (batch.views[:, :, 1:].permute(0, 1, 3, 4, 2)[hit[:, :, 0]] == -1).all()


def test_no_light_mode_means_points_only(box_path):
    batch = load_or_create_multimodal_batch("cpu", mesh_path=box_path, **SMALL)
    assert batch.points.shape == (1, 6, 256)
    assert batch.views is None and batch.cameras is None


def test_cache_is_reused_and_keyed_by_arguments(box_path, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = load_or_create_multimodal_batch(
        "cpu", model_path=box_path, cache_dir=str(cache), mv_light_mode="basic", **SMALL
    )
    assert len(os.listdir(cache)) == 1

    def fail(*args, **kwargs):
        raise AssertionError("the cached batch should have been loaded")

    monkeypatch.setattr(multimodal_batch, "_create", fail)
    again = load_or_create_multimodal_batch(
        "cpu", model_path=box_path, cache_dir=str(cache), mv_light_mode="basic", **SMALL
    )
    assert torch.equal(first.points, again.points) and torch.equal(first.views, again.views)
    assert torch.equal(first.depths, again.depths) and torch.equal(first.cameras.origin, again.cameras.origin)
    assert again.cameras.shape == (1, 3)
    monkeypatch.undo()
    load_or_create_multimodal_batch(
        "cpu", model_path=box_path, cache_dir=str(cache), mv_light_mode="basic", seed=1, **SMALL
    )
    assert len(os.listdir(cache)) == 2
    assert not [name for name in os.listdir(cache) if name.endswith(".tmp")]


def test_batches_stack_assets_and_cameras(box_path, sphere_path):
    batch = load_or_create_multimodal_batches(
        [box_path, sphere_path], "cpu", progress=False, mv_light_mode="basic", **SMALL
    )
    assert batch.points.shape == (2, 6, 256)
    assert batch.views.shape == (2, 3, 3, 16, 16)
    assert batch.cameras.shape == (2, 3) and batch.cameras.origin.shape == (6, 3)
    assert torch.equal(batch.points[1, 3:].T, torch.tensor([0.0, 1.0, 0.0]).expand(256, 3))


def test_bad_arguments_raise_before_any_work(box_path):
    with pytest.raises(ValueError, match="exactly one"):
        load_or_create_multimodal_batch("cpu")
    with pytest.raises(ValueError, match="exactly one"):
        load_or_create_multimodal_batch("cpu", mesh_path=box_path, model_path=box_path)
    with pytest.raises(ValueError, match="mv_light_mode"):
        load_or_create_multimodal_batch("cpu", model_path=box_path, mv_light_mode="random")
    with pytest.raises(ValueError, match="point_count"):
        load_or_create_multimodal_batch("cpu", model_path=box_path, point_count=10, random_sample_count=5)


@pytest.mark.slow
def test_full_size_batch_matches_the_release_settings(tmp_path):
    sphere = trimesh.creation.icosphere(subdivisions=5)  # 20,480 faces
    sphere.visual.vertex_colors = ((sphere.vertices + 1) * 127.5).astype("uint8")
    sphere.export(tmp_path / "s.ply")
    batch = load_or_create_multimodal_batch("cpu", model_path=str(tmp_path / "s.ply"), mv_light_mode="basic")
    assert batch.points.shape == (1, 6, 16384)
    assert batch.views.shape == (1, 20, 3, 256, 256)
    assert batch.depths.shape == batch.view_alphas.shape == (1, 20, 1, 256, 256)
    assert batch.cameras.shape == (1, 20)
    finite = torch.isfinite(batch.depths)
    assert torch.equal(finite, batch.view_alphas.bool())
    assert 3.0 - 1e-3 <= batch.depths[finite].min() and batch.depths[finite].max() <= 4.0


def test_batch_feeds_the_transmitter_encoder(golden, box_path):
    """End to end with the small golden encoder (256 points, 3 views of 16x16)."""
    from shap_e.models.configs import model_from_config

    encoder = model_from_config(golden("e")["config"]).eval().encoder
    batch = load_or_create_multimodal_batch("cpu", model_path=box_path, mv_light_mode="basic", **SMALL)
    with torch.no_grad():
        latent = encoder.encode_to_bottleneck(batch, generator=torch.Generator().manual_seed(0))
    assert latent.shape[0] == 1 and torch.isfinite(latent).all()
    assert latent.abs().max() < 1
