"""Surface sampling and the coloured encoder point cloud (farthest-point sampling: tests/rendering)."""
import pytest
import torch
import trimesh

from shap_e.encoding.assets import load_asset
from shap_e.encoding.point_cloud import sample_point_cloud, sample_surface


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def two_part_path(tmp_path):
    """A red cube (x < 0) and a blue slab (x > 0) saved as one PLY with face colours."""
    red = trimesh.creation.box(extents=[1.0, 1.0, 1.0])
    red.apply_translation([-0.6, 0.0, 0.0])
    red.visual.face_colors = [255, 0, 0, 255]
    blue = trimesh.creation.box(extents=[0.4, 1.0, 0.3])
    blue.apply_translation([0.5, 0.0, 0.0])
    blue.visual.face_colors = [0, 0, 255, 255]
    trimesh.util.concatenate([red, blue]).export(tmp_path / "two.ply")
    return str(tmp_path / "two.ply")


def test_surface_samples_lie_on_the_box_and_follow_face_areas(tmp_path):
    trimesh.creation.box(extents=[2.0, 1.0, 1.0]).export(tmp_path / "box.ply")
    mesh = load_asset(str(tmp_path / "box.ply"))  # -> [-1, 1] x [-0.5, 0.5]^2
    points, face, bary = sample_surface(mesh, 20000, _gen(0))
    on_face = ((points.abs() - torch.tensor([1.0, 0.5, 0.5])).abs() < 1e-5).any(dim=1)
    assert on_face.all()
    assert (bary >= 0).all() and torch.allclose(bary.sum(1), torch.ones(20000))
    # Areas (after scaling to 2 x 1 x 1): x faces 2 x 1, y faces 2 x 2, z faces 2 x 2 -> x holds 2 / 10.
    on_x = ((points[:, 0].abs() - 1).abs() < 1e-5).double().mean().item()
    assert on_x == pytest.approx(0.2, abs=0.01)


def test_point_cloud_has_fps_order_shape_and_ranges(two_part_path):
    mesh = load_asset(two_part_path)
    pc = sample_point_cloud(mesh, 1024, _gen(0), n_candidates=8192)
    assert pc.shape == (6, 1024)
    assert pc[:3].abs().max() <= 1 + 1e-6
    assert torch.allclose(pc[3:] * 255, (pc[3:] * 255).round(), atol=1e-4)
    xyz = pc[:3].T
    # FPS order: point k is at least as far from points 0..k-1 as any later point.
    for k in (1, 10, 100, 500):
        to_set = torch.cdist(xyz[k:], xyz[:k]).amin(dim=1)
        assert to_set[0] >= to_set.max() - 1e-6


def test_point_colours_follow_the_parts(two_part_path):
    mesh = load_asset(two_part_path)
    pc = sample_point_cloud(mesh, 2048, _gen(1), n_candidates=2**14)
    # After normalisation the red cube spans x in [-1, 0.11] and the blue slab x in [0.56, 1].
    left = pc[0] < 0.1
    right = pc[0] > 0.5
    assert left.sum() > 500 and right.sum() > 200
    assert torch.equal(pc[3:, left].T, torch.tensor([1.0, 0.0, 0.0]).expand(int(left.sum()), 3))
    assert torch.equal(pc[3:, right].T, torch.tensor([0.0, 0.0, 1.0]).expand(int(right.sum()), 3))


def test_point_cloud_is_reproducible_with_a_generator(two_part_path):
    mesh = load_asset(two_part_path)
    a = sample_point_cloud(mesh, 256, _gen(4), n_candidates=4096)
    b = sample_point_cloud(mesh, 256, _gen(4), n_candidates=4096)
    c = sample_point_cloud(mesh, 256, _gen(5), n_candidates=4096)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
