"""Photo-like conditioning renders: layout, 8-bit values, white background, framing, camera poses, seeds."""
import math

import pytest
import torch
import trimesh

from shap_e.train.condition_images import photo_cameras, render_condition_images
from shap_e.encoding.assets import load_asset


@pytest.fixture(scope="module")
def red_box_path(tmp_path_factory):
    box = trimesh.creation.box(extents=[1.0, 0.8, 0.6])
    box.visual.face_colors = [255, 0, 0, 255]
    path = tmp_path_factory.mktemp("mesh") / "red.ply"
    box.export(path)
    return path


@pytest.fixture(scope="module")
def red_box(red_box_path):
    return load_asset(str(red_box_path))


def test_renders_are_8bit_images_in_minus_one_to_one_on_white(red_box):
    images = render_condition_images(red_box, n_views=3, size=32, seed=0)
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.float32
    assert images.min() >= -1 and images.max() <= 1
    codes = (images + 1) * 127.5
    torch.testing.assert_close(codes, codes.round(), rtol=0, atol=1e-4)
    assert (images[:, :, 0, 0] == 1).all() and (images[:, :, -1, -1] == 1).all()  # white corners
    red = images[:, 0] > images[:, 1] + 0.5  # the object is red: much more red than green
    assert (red.flatten(1).float().mean(dim=1) > 0.1).all()


def test_same_seed_same_views_other_seed_other_views(red_box, red_box_path):
    a = render_condition_images(red_box, 2, 32, seed=4)
    torch.testing.assert_close(render_condition_images(red_box_path, 2, 32, seed=4), a, rtol=0, atol=0)
    assert not torch.equal(render_condition_images(red_box, 2, 32, seed=5), a)


def test_the_object_reaches_seventy_percent_of_the_half_frame(red_box):
    size = 64
    images = render_condition_images(red_box, 4, size, seed=1, supersample=1)
    coords = torch.arange(size) / (size - 1) * 2 - 1  # the camera model's pixel coordinates
    for image in images:
        rows, cols = (image < 0.99).any(dim=0).nonzero(as_tuple=True)
        reach = max(coords[rows].abs().max(), coords[cols].abs().max())
        assert reach == pytest.approx(0.7, abs=2 / (size - 1))


def test_cameras_look_down_at_the_object_from_photo_elevations(red_box):
    cameras = photo_cameras(red_box.verts, 64, 32, torch.Generator().manual_seed(0))
    elevation = torch.rad2deg(torch.asin(cameras.origin[:, 2] / cameras.origin.norm(dim=1)))
    assert elevation.min() >= 15 - 1e-4 and elevation.max() <= 35 + 1e-4
    assert elevation.max() - elevation.min() > 10
    azimuth = torch.atan2(cameras.origin[:, 1], cameras.origin[:, 0])
    assert azimuth.max() - azimuth.min() > math.pi  # all around the object
    torch.testing.assert_close(cameras.z, -cameras.origin / cameras.origin.norm(dim=1, keepdim=True))
    assert (-cameras.y[:, 2] > 0).all()  # image up is world up


def test_bad_arguments_raise_value_errors(red_box):
    with pytest.raises(ValueError, match="n_views >= 1"):
        render_condition_images(red_box, 0, 32)
    with pytest.raises(ValueError, match="fill=0"):
        render_condition_images(red_box, 1, 32, fill=0)
    with pytest.raises(ValueError, match="elevation_deg"):
        render_condition_images(red_box, 1, 32, elevation_deg=(40, 20))


def test_azimuth_range_keeps_cameras_around_plus_x(red_box):
    cameras = photo_cameras(red_box.verts, 32, 64, torch.Generator().manual_seed(0), azimuth_deg=(-20.0, 20.0))
    azimuth = torch.rad2deg(torch.atan2(cameras.origin[:, 1], cameras.origin[:, 0]))
    assert azimuth.abs().max() <= 20.0 + 1e-3 and azimuth.std() > 5.0
    fixed = photo_cameras(red_box.verts, 2, 64, torch.Generator().manual_seed(0), azimuth_deg=(0.0, 0.0))
    torch.testing.assert_close(fixed.origin[:, 1], torch.zeros(2), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="azimuth_deg"):
        photo_cameras(red_box.verts, 1, 64, torch.Generator(), azimuth_deg=(10.0, -10.0))
