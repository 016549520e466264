import math

import pytest
import torch

from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras, look_at


def _golden_encoder_cameras(golden) -> ProjectiveCamera:
    cams = golden("e")["inputs"]["cameras"]
    frames = {k: cams[k].reshape(-1, 3) for k in ("origin", "x", "y", "z")}
    return ProjectiveCamera(
        **frames, width=cams["width"], height=cams["height"], x_fov=cams["x_fov"], y_fov=cams["y_fov"], shape=(2, 3)
    )


def _camera(n=2, **overrides) -> ProjectiveCamera:
    eye = torch.eye(3)
    args = dict(
        origin=torch.zeros(n, 3), x=eye[0].repeat(n, 1), y=eye[1].repeat(n, 1), z=eye[2].repeat(n, 1),
        width=4, height=3, x_fov=1.0, y_fov=0.8,
    )
    args.update(overrides)
    return ProjectiveCamera(**args)


def test_pan_cameras_match_golden_frames_and_metadata(golden):
    ref = golden("g")["outputs"]["pan_cameras"]
    cams = create_pan_cameras(16)
    assert cams.shape == tuple(ref["shape"]) == (1, 20)
    assert (cams.width, cams.height, cams.x_fov, cams.y_fov) == (16, 16, 0.7, 0.7)
    for key in ("origin", "x", "y", "z"):
        assert getattr(cams, key).dtype == torch.float32
        torch.testing.assert_close(getattr(cams, key), ref[key], atol=1e-6, rtol=0)


def test_pan_camera_image_coords_and_rays_match_golden(golden):
    ref = golden("g")["outputs"]["pan_cameras"]
    cams = create_pan_cameras(16)
    coords = cams.image_coords()
    assert coords.dtype == torch.int64
    assert torch.equal(coords, ref["image_coords"])
    rays = cams.rays()
    assert rays.shape == (20, 256, 2, 3)
    torch.testing.assert_close(rays, ref["rays"], atol=1e-6, rtol=0)


def test_camera_rays_match_golden_encoder_dense_pose_rays(golden):
    cams = _golden_encoder_cameras(golden)
    rays = cams.rays().view(2, 3, 16, 16, 2, 3)
    torch.testing.assert_close(rays, golden("e")["outputs"]["dense_pose_rays"], atol=1e-6, rtol=0)


def test_pan_cameras_first_and_last_view_coincide_at_radius_four():
    cams = create_pan_cameras(8)
    torch.testing.assert_close(cams.origin[0], cams.origin[-1], atol=1e-6, rtol=0)
    torch.testing.assert_close(cams.origin.norm(dim=-1), torch.full((20,), 4.0))
    torch.testing.assert_close(cams.origin[:, 2], torch.full((20,), 2 / math.sqrt(1.25)))  # elevation atan(1/2)


def test_rays_are_unit_and_image_corners_sit_at_half_fov():
    cams = _camera()
    rays = cams.rays()
    torch.testing.assert_close(rays[..., 1, :].norm(dim=-1), torch.ones(2, 12))
    top_left = rays[0, 0, 1]
    expected = torch.tensor([-math.tan(0.5), -math.tan(0.4), 1.0])
    torch.testing.assert_close(top_left, expected / expected.norm())
    bottom_right = rays[0, -1, 1]
    torch.testing.assert_close(bottom_right, -expected * torch.tensor([1, 1, -1]) / expected.norm())


def test_camera_rays_accept_shared_or_per_camera_coords():
    cams = _camera(n=3)
    coords = torch.tensor([[0.5, 1.0], [3.0, 2.0]])
    shared = cams.camera_rays(coords)
    per_camera = cams.camera_rays(coords.expand(3, 2, 2))
    assert shared.shape == (3, 2, 2, 3)
    assert torch.equal(shared, per_camera)
    with pytest.raises(ValueError, match="coords"):
        cams.camera_rays(torch.zeros(2, 2, 2))


def test_resize_image_keeps_aspect_ratio_or_raises():
    cams = _camera()
    resized = cams.resize_image(8, 6)
    assert (resized.width, resized.height) == (8, 6)
    assert resized.rays().shape == (2, 48, 2, 3)
    with pytest.raises(ValueError, match="aspect"):
        cams.resize_image(8, 8)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(x_fov=0.0), "x_fov"),
        (dict(y_fov=math.pi), "y_fov"),
        (dict(width=0), "width"),
        (dict(height=2.5), "height"),
        (dict(x=torch.zeros(3, 3)), "x has 3 rows"),
        (dict(z=torch.zeros(2, 2)), "z must be"),
        (dict(shape=(3, 1)), "shape"),
    ],
)
def test_invalid_cameras_raise_value_error_naming_the_argument(overrides, match):
    with pytest.raises(ValueError, match=match):
        _camera(**overrides)


def test_shape_defaults_to_flat_batch_and_reshape_keeps_frames():
    cams = _camera(n=6)
    assert cams.shape == (6,)
    assert cams.reshape(2, 3).shape == (2, 3)
    assert torch.equal(cams.reshape(2, 3).x, cams.x)


def test_look_at_reproduces_pan_and_golden_encoder_frames(golden):
    pan = create_pan_cameras(16)
    looked = look_at(pan.origin, torch.zeros(20, 3), 16, 16, 0.7)
    enc = _golden_encoder_cameras(golden)
    looked_enc = look_at(enc.origin, torch.zeros(6, 3), 16, 16, enc.x_fov)
    for key in ("x", "y", "z"):
        torch.testing.assert_close(getattr(looked, key), getattr(pan, key), atol=1e-6, rtol=0)
        torch.testing.assert_close(getattr(looked_enc, key), getattr(enc, key), atol=1e-6, rtol=0)


def test_look_at_builds_right_handed_frames_with_y_down():
    origins = torch.tensor([[3.0, -1.0, 2.0], [0.0, 0.5, -4.0]])
    targets = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    cams = look_at(origins, targets, 8, 8, 0.5)
    frame = torch.stack([cams.x, cams.y, cams.z], dim=1)  # [N, 3, 3]
    torch.testing.assert_close(frame @ frame.transpose(1, 2), torch.eye(3).expand(2, 3, 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.linalg.det(frame), torch.ones(2))
    toward = targets - origins
    torch.testing.assert_close(cams.z, toward / toward.norm(dim=-1, keepdim=True))
    assert (cams.y[:, 2] < 0).all()  # image down points away from world up


def test_look_at_rejects_degenerate_views():
    with pytest.raises(ValueError, match="up"):
        look_at(torch.tensor([[0.0, 0.0, 5.0]]), torch.zeros(1, 3), 8, 8, 0.5)
    with pytest.raises(ValueError, match="target"):
        look_at(torch.zeros(1, 3), torch.zeros(1, 3), 8, 8, 0.5)
