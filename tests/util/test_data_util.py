"""The official `shap_e.util.data_util` building blocks, without Blender, on the example mushroom."""
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.rendering.point_cloud import PointCloud
from shap_e.rendering.view_data import ProjectiveCamera
from shap_e.util.collections import AttrDict
from shap_e.util.data_util import (
    load_or_create_multimodal_batch,
    load_or_create_multiview,
    load_or_create_pc,
    mv_to_pc,
    normalize_input_batch,
    process_depth,
    process_image,
)

MUSHROOM = str(Path(__file__).resolve().parents[2] / "notebooks" / "example_data" / "mushroom.ply")


def test_the_official_point_cloud_steps_give_the_encoders_batch(tmp_path):
    pc = load_or_create_pc(mesh_path=None, model_path=MUSHROOM, cache_dir=str(tmp_path), random_sample_count=4096,
                           point_count=512, num_views=40)
    assert isinstance(pc, PointCloud) and pc.coords.shape == (512, 3) and set(pc.channels) == set("RGB")
    assert np.abs(pc.coords).max() <= 0.5 + 1e-6  # Blender units: the asset fills a unit box
    # As the official load_or_create_multimodal_batch does: colours as 0..255, then normalised.
    points = np.concatenate([pc.coords.T, pc.select_channels(list("RGB")).T])[None]
    official = normalize_input_batch(AttrDict(points=torch.from_numpy(points).float()), pc_scale=2, color_scale=1 / 255)
    ours = load_or_create_multimodal_batch(torch.device("cpu"), model_path=MUSHROOM, point_count=512,
                                           random_sample_count=4096)
    torch.testing.assert_close(official.points, ours.points, atol=1e-6, rtol=0)
    cached = list(tmp_path.iterdir())
    assert len(cached) == 1
    again = load_or_create_pc(mesh_path=None, model_path=MUSHROOM, cache_dir=str(tmp_path), random_sample_count=4096,
                              point_count=512, num_views=40)
    assert np.array_equal(again.coords, pc.coords) and list(tmp_path.iterdir()) == cached


def test_multiview_renders_are_view_data_in_blender_units(tmp_path):
    with load_or_create_multiview(mesh_path=MUSHROOM, model_path=None, cache_dir=str(tmp_path), num_views=2,
                                  light_mode="basic") as views:
        assert views.num_views == 2 and views.channel_names == list("RGBAD")
        camera, image = views.load_view(0, list("RGBAD"))
    assert isinstance(camera, ProjectiveCamera) and (camera.width, camera.height) == (512, 512)
    assert np.linalg.norm(camera.origin) == pytest.approx(2.0, abs=1e-5)
    alpha, depth = image[..., 3], image[..., 4]
    assert 0 < alpha.mean() < 1 and np.isfinite(depth[alpha == 1]).all() and np.isinf(depth[alpha == 0]).all()
    assert image[..., :3].min() >= 0 and image[..., :3].max() <= 1
    with load_or_create_multiview(mesh_path=MUSHROOM, model_path=None, cache_dir=str(tmp_path), num_views=2) as unlit:
        _, flat = unlit.load_view(0, list("RGBA"))
    hit = alpha == 1
    assert (flat[hit, :3] >= image[hit, :3] - 1 / 255).all()  # lighting only darkens (brightness <= 1)
    assert len(list(tmp_path.iterdir())) == 2
    with pytest.raises(ValueError, match="light_mode"):
        with load_or_create_multiview(mesh_path=MUSHROOM, model_path=None, cache_dir=None, light_mode="random"):
            pass


def test_points_back_projected_from_the_views_lie_on_the_surface(tmp_path):
    np.random.seed(0)
    with load_or_create_multiview(mesh_path=MUSHROOM, model_path=None, cache_dir=None, num_views=4) as views:
        pc = mv_to_pc(views, random_sample_count=2000, point_count=300)
    assert pc.coords.shape == (300, 3) and set(pc.channels) >= set("RGB")
    surface = load_or_create_pc(mesh_path=MUSHROOM, model_path=None, cache_dir=None, random_sample_count=8192,
                                point_count=4096, num_views=0).coords
    nearest = np.sqrt(((pc.coords[:, None] - surface[None]) ** 2).sum(-1)).min(axis=1)
    assert np.median(nearest) < 0.01 and nearest.max() < 0.05


def test_normalize_input_batch_scales_typed_batches_too():
    from shap_e.rendering.cameras import create_pan_cameras

    batch = MultimodalBatch(points=torch.ones(1, 6, 4), depths=torch.ones(1, 2, 1, 3, 3),
                            views=torch.zeros(1, 2, 3, 3, 3), view_alphas=torch.ones(1, 2, 1, 3, 3),
                            cameras=create_pan_cameras(3))
    out = normalize_input_batch(batch, pc_scale=2, color_scale=0.5)
    assert torch.equal(out.points[0, :, 0], torch.tensor([2.0, 2, 2, 0.5, 0.5, 0.5]))
    assert torch.equal(out.depths, batch.depths * 2) and torch.equal(out.cameras.origin, batch.cameras.origin * 2)
    assert torch.equal(batch.points, torch.ones(1, 6, 4))  # the input is left alone


def test_process_depth_crops_to_a_square_and_averages_areas():
    depth = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = process_depth(depth, 2)
    square = depth[:, 1:5]
    expected = square.reshape(2, 2, 2, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(out, expected)


def test_process_image_gives_rgb_and_alpha_at_the_size_asked():
    rgba = np.zeros((6, 8, 4), dtype=np.uint8)
    rgba[..., :3] = 200
    rgba[:, 4:, 3] = 255  # right half opaque
    image, alpha = process_image(rgba, "black", 3)
    assert image.mode == "RGB" and alpha.mode == "L" and image.size == alpha.size == (3, 3)
    pixels = np.asarray(image)
    assert pixels[:, 0].max() == 0 and pixels[:, -1].min() == 200
    gray, _ = process_image(Image.fromarray(np.full((4, 4), 9, np.uint8)), "white", 4)
    assert gray.mode == "RGB" and np.asarray(gray).min() == 9
