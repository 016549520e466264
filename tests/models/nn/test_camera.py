"""The official camera classes (`shap_e.models.nn.camera`) against golden g/e and their contracts."""
import math

import pytest
import torch

from shap_e.models.nn.camera import (
    DifferentiableCamera,
    DifferentiableCameraBatch,
    DifferentiableProjectiveCamera,
    as_projective,
    camera_batch,
    camera_orientation,
    get_image_coords,
    normalize,
    project_out,
    projective_camera_frame,
)
from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras


def _pan(size=16) -> DifferentiableProjectiveCamera:
    return camera_batch(create_pan_cameras(size)).flat_camera


def _frame(n=2, **overrides):
    eye = torch.eye(3)
    args = dict(origin=torch.zeros(n, 3), x=eye[0].repeat(n, 1), y=eye[1].repeat(n, 1), z=eye[2].repeat(n, 1),
                width=4, height=2, x_fov=1.0, y_fov=0.6)
    args.update(overrides)
    return args


def test_pan_camera_rays_match_golden_for_any_coordinate_shape(golden):
    ref = golden("g")["outputs"]["pan_cameras"]
    camera = _pan()
    assert torch.equal(camera.image_coords(), ref["image_coords"])
    assert torch.equal(get_image_coords(16, 16), ref["image_coords"])
    flat = camera.image_coords()[None].expand(20, -1, -1)
    torch.testing.assert_close(camera.camera_rays(flat), ref["rays"], atol=1e-6, rtol=0)
    grid = flat.reshape(20, 16, 16, 2)
    rays = camera.camera_rays(grid)
    assert rays.shape == (20, 16, 16, 2, 3)
    torch.testing.assert_close(rays.reshape(20, 256, 2, 3), ref["rays"], atol=1e-6, rtol=0)
    one = camera.camera_rays(flat[:, 5])  # one coordinate per camera: [N, 2] -> [N, 2, 3]
    torch.testing.assert_close(one, ref["rays"][:, 5], atol=1e-6, rtol=0)


def test_resolution_and_fov_are_float_pairs():
    camera = DifferentiableProjectiveCamera(**_frame())
    assert torch.equal(camera.resolution(), torch.tensor([4.0, 2.0]))
    torch.testing.assert_close(camera.fov(), torch.tensor([1.0, 0.6]))
    assert camera.resolution().dtype == camera.fov().dtype == torch.float32


def test_resize_keeps_the_frame_and_refuses_another_aspect_ratio():
    camera = DifferentiableProjectiveCamera(**_frame())
    bigger = camera.resize_image(8, 4)
    assert isinstance(bigger, DifferentiableProjectiveCamera)
    assert (bigger.width, bigger.height, bigger.x_fov) == (8, 4, 1.0)
    assert bigger.origin is camera.origin
    with pytest.raises(ValueError, match="aspect ratio"):
        camera.resize_image(8, 8)


def test_rays_are_differentiable_in_the_camera_frame():
    frame = _frame()
    z = frame["z"].clone().requires_grad_(True)
    origin = frame["origin"].clone().requires_grad_(True)
    camera = DifferentiableProjectiveCamera(**{**frame, "z": z, "origin": origin})
    rays = camera.camera_rays(camera.image_coords()[None].expand(2, -1, -1))
    rays.sum().backward()
    assert z.grad is not None and z.grad.abs().sum() > 0
    assert torch.equal(origin.grad, torch.full_like(origin, 8.0))  # 8 pixels per camera see the origin once


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(x=torch.zeros(2, 2)), "x must be"),
        (dict(y=torch.zeros(3, 3)), "y has 3 rows"),
        (dict(width=0), "width"),
        (dict(x_fov=math.pi), "x_fov"),
    ],
)
def test_bad_cameras_raise_value_errors_naming_the_field(overrides, match):
    with pytest.raises(ValueError, match=match):
        DifferentiableProjectiveCamera(**_frame(**overrides))


def test_camera_rays_need_one_row_of_coordinates_per_camera():
    camera = DifferentiableProjectiveCamera(**_frame())
    with pytest.raises(ValueError, match=r"coords must be \[2, ..., 2\]"):
        camera.camera_rays(camera.image_coords())


def test_camera_batch_checks_its_shape_and_camera():
    camera = DifferentiableProjectiveCamera(**_frame())
    assert DifferentiableCameraBatch(shape=(1, 2), flat_camera=camera).shape == (1, 2)
    with pytest.raises(ValueError, match="holds 3 cameras"):
        DifferentiableCameraBatch(shape=(1, 3), flat_camera=camera)
    with pytest.raises(ValueError, match="positive ints"):
        DifferentiableCameraBatch(shape=(1, 0), flat_camera=camera)
    with pytest.raises(TypeError, match="DifferentiableCamera"):
        DifferentiableCameraBatch(shape=(1, 2), flat_camera=create_pan_cameras(2))
    assert issubclass(DifferentiableProjectiveCamera, DifferentiableCamera)


def test_official_and_typed_cameras_convert_both_ways_sharing_tensors():
    typed = create_pan_cameras(8)
    official = camera_batch(typed)
    assert official.shape == (1, 20) and official.flat_camera.width == 8
    back = as_projective(official)
    assert isinstance(back, ProjectiveCamera) and back.shape == (1, 20)
    assert back.origin is typed.origin and as_projective(typed) is typed
    with pytest.raises(TypeError, match="DifferentiableCameraBatch"):
        as_projective(official.flat_camera)


def test_camera_orientation_is_a_right_handed_frame_with_y_down():
    toward = torch.tensor([[1.0, 2.0, -0.5], [0.0, -3.0, 1.0]])
    rows = camera_orientation(toward)
    assert rows.shape == (2, 3, 3)
    x, y, z = rows.unbind(dim=-2)
    torch.testing.assert_close(z, normalize(toward))
    torch.testing.assert_close(rows @ rows.transpose(1, 2), torch.eye(3).expand(2, 3, 3), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cross(x, y, dim=-1), z, atol=1e-6, rtol=0)
    assert (y[:, 2] < 0).all()  # image down points away from world up
    with pytest.raises(ValueError, match="parallel to `up`"):
        camera_orientation(torch.tensor([[0.0, 0.0, 2.0]]))


def test_project_out_removes_the_component_along_the_second_vector():
    v = torch.tensor([[1.0, 2.0, 3.0]])
    out = project_out(v, torch.tensor([[0.0, 0.0, 5.0]]))
    assert torch.equal(out, torch.tensor([[1.0, 2.0, 0.0]]))


def test_projective_camera_frame_rebuilds_the_golden_encoder_cameras(golden):
    cams = golden("e")["inputs"]["cameras"]
    origin = cams["origin"]  # [2, 3, 3]: looking at the world origin
    camera = projective_camera_frame(origin, -origin, DifferentiableProjectiveCamera(**_frame(
        width=cams["width"], height=cams["height"], x_fov=cams["x_fov"], y_fov=cams["y_fov"])))
    assert camera.origin.shape == (6, 3) and camera.width == 16
    for key in ("x", "y", "z"):
        torch.testing.assert_close(getattr(camera, key), cams[key].reshape(-1, 3), atol=1e-6, rtol=0)
