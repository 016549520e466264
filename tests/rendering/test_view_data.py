"""The numpy `ProjectiveCamera` gives the pan cameras' golden rays (g) through the torch camera, and
`MemoryViewData` serves views."""
import math

import numpy as np
import pytest
import torch

from shap_e.rendering.cameras import create_pan_cameras
from shap_e.rendering.view_data import MemoryViewData, ProjectiveCamera


def _golden_camera(golden, index: int) -> ProjectiveCamera:
    pan = golden("g")["outputs"]["pan_cameras"]
    return ProjectiveCamera(
        origin=pan["origin"][index].numpy(), x=pan["x"][index].numpy(), y=pan["y"][index].numpy(),
        z=pan["z"][index].numpy(), width=pan["width"], height=pan["height"], x_fov=pan["x_fov"], y_fov=pan["y_fov"],
    )


@pytest.mark.parametrize("index", [0, 7, 19])
def test_camera_rays_match_the_golden_pan_camera_rays(golden, index):
    pan = golden("g")["outputs"]["pan_cameras"]
    camera = _golden_camera(golden, index)
    coords = camera.image_coords()
    assert coords.dtype == np.float32 and np.array_equal(coords, pan["image_coords"].numpy())
    rays = camera.camera_rays(coords)
    assert rays.shape == (256, 2, 3) and rays.dtype == np.float64
    np.testing.assert_allclose(rays, pan["rays"][index].numpy(), atol=1e-6, rtol=0)


def test_camera_rays_follow_the_pinhole_formula():
    camera = ProjectiveCamera(origin=np.array([0.0, 0, -2]), x=np.array([1.0, 0, 0]), y=np.array([0.0, 1, 0]),
                              z=np.array([0.0, 0, 1]), width=5, height=3, x_fov=1.0, y_fov=0.5)
    rays = camera.camera_rays(np.array([[0, 0], [4, 2], [2, 1]]))
    corner = np.array([-math.tan(0.5), -math.tan(0.25), 1.0])
    np.testing.assert_allclose(rays[0, 1], corner / np.linalg.norm(corner), atol=1e-7)
    np.testing.assert_allclose(rays[1, 1], -corner * [1, 1, -1] / np.linalg.norm(corner), atol=1e-7)
    np.testing.assert_allclose(rays[2], [[0, 0, -2], [0, 0, 1]], atol=1e-7)
    np.testing.assert_allclose(camera.depth_directions(np.zeros((4, 2))), np.tile([[0.0, 0, 1]], (4, 1)))
    with pytest.raises(ValueError, match="coords"):
        camera.camera_rays(np.zeros((3, 3)))


def test_derived_cameras(golden):
    camera = _golden_camera(golden, 3)
    assert (camera.resize_image(32, 32).width, camera.resize_image(32, 32).height) == (32, 32)
    with pytest.raises(ValueError, match="aspect ratio"):
        camera.resize_image(32, 16)
    wide = ProjectiveCamera(camera.origin, camera.x, camera.y, camera.z, 40, 30, 0.9, 0.6)
    crop = wide.center_crop()
    assert (crop.width, crop.height, crop.x_fov, crop.y_fov) == (30, 30, 0.6, 0.6)
    scaled = camera.scale_scene(0.5)
    np.testing.assert_allclose(scaled.origin, camera.origin * 0.5)
    assert scaled.z is camera.z


def test_torch_conversion_round_trips():
    pan = create_pan_cameras(8)
    camera = ProjectiveCamera.from_torch(pan, index=5)
    assert camera.width == 8 and np.array_equal(camera.origin, pan.origin[5].numpy())
    back = camera.to_torch()
    assert torch.equal(back.origin, pan.origin[5:6]) and back.x_fov == pan.x_fov


def test_memory_view_data_loads_channels_of_a_view(golden):
    cameras = [_golden_camera(golden, i) for i in range(2)]
    data = MemoryViewData({"R": np.zeros((2, 16, 16)), "D": np.ones((2, 16, 16))}, cameras)
    assert data.num_views == 2 and data.channel_names == ["R", "D"]
    camera, values = data.load_view(1, ["D", "R"])
    assert camera is cameras[1] and values.shape == (16, 16, 2) and values[..., 0].all() and not values[..., 1].any()
    with pytest.raises(ValueError, match="unknown channels"):
        data.load_view(0, ["G"])
    with pytest.raises(ValueError, match="one image per camera"):
        MemoryViewData({"R": np.zeros((3, 16, 16))}, cameras)
