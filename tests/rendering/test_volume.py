"""Ray / box intersection (docs/behaviour.md#render-volume) against hand-computed cases and golden f."""
import torch

from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras
from shap_e.rendering.volume import BoundingBox, intersect_box

BOX = BoundingBox(torch.full((3,), -1.0), torch.full((3,), 1.0))


def _rays(origins, directions):
    o = torch.tensor(origins, dtype=torch.float32)
    d = torch.nn.functional.normalize(torch.tensor(directions, dtype=torch.float32), dim=-1)
    return o, d


def test_axis_parallel_ray_through_the_centre_enters_and_leaves_at_the_faces():
    o, d = _rays([[0.0, 0.0, -4.0]], [[0.0, 0.0, 1.0]])
    r = intersect_box(o, d, BOX)
    torch.testing.assert_close(r.t0, torch.tensor([[3.0]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(r.t1, torch.tensor([[5.0]]), atol=1e-5, rtol=0)
    assert r.intersected.tolist() == [[True]]
    assert torch.isfinite(r.t0).all() and torch.isfinite(r.t1).all()


def test_missing_rays_get_unit_range_and_inside_rays_start_at_zero():
    o, d = _rays([[0.0, 3.0, -4.0], [0.2, 0.1, 0.0]], [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    r = intersect_box(o, d, BOX)
    assert r.intersected[:, 0].tolist() == [False, True]
    assert r.t0[0].item() == 0.0 and r.t1[0].item() == 1.0
    assert r.t0[1].item() == 0.0
    torch.testing.assert_close(r.t1[1], torch.tensor([0.8]), atol=1e-5, rtol=0)


def test_chord_shorter_than_min_t_range_counts_as_a_miss():
    # 45-degree rays entering the y = -1 face at x = 1 - offset: chord length offset * sqrt(2).
    def ray_at(offset):
        return _rays([[1.0 - offset - 3.0, -4.0, 0.0]], [[1.0, 1.0, 0.0]])

    assert not intersect_box(*ray_at(2e-4), BOX).intersected.item()  # chord 2.8e-4 < 1e-3
    assert intersect_box(*ray_at(2e-3), BOX).intersected.item()  # chord 2.8e-3


def test_pan_camera_ranges_match_golden(golden):
    f = golden("f")
    pan = create_pan_cameras(16)
    idx = f["inputs"]["nerf_camera_indices_in_pan16"]
    cams = ProjectiveCamera(
        origin=pan.origin[idx], x=pan.x[idx], y=pan.y[idx], z=pan.z[idx], width=16, height=16, x_fov=0.7, y_fov=0.7
    )
    rays = cams.rays()
    r = intersect_box(rays[..., 0, :], rays[..., 1, :], BOX)
    ref = f["outputs"]["nerf_nodir"]
    torch.testing.assert_close(r.t0.view(1, 2, 16, 16, 1), ref["t0"], atol=1e-6, rtol=0)
    torch.testing.assert_close(r.t1.view(1, 2, 16, 16, 1), ref["t1"], atol=1e-6, rtol=0)
    assert torch.equal(r.intersected.view(1, 2, 16, 16, 1), ref["intersected"])
