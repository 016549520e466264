"""Volumetric IoU, Chamfer distance and colour error against analytic values."""
import pytest
import torch
import trimesh

from shap_e.data import CATEGORIES, generate_asset
from shap_e.eval.metrics import (
    chamfer_and_color,
    face_colored_mesh,
    grid_iou,
    is_empty,
    occupancy,
    to_eval_mesh,
    volumetric_iou,
)
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.encoding.targets import winding_number


def box(extents=(1.0, 1.0, 1.0), offset=(0.0, 0.0, 0.0)) -> TorchMesh:
    return to_eval_mesh(trimesh.creation.box(extents=extents).apply_translation(offset))


def test_occupancy_of_a_grid_aligned_box_counts_exactly_its_cells():
    grid = occupancy(box((1.0, 0.5, 1.5)), resolution=32)
    assert grid.shape == (32, 32, 32)
    assert int(grid.sum()) == 16 * 8 * 24
    assert grid[16, 16, 16] and not grid[0, 16, 16]


def test_iou_of_a_mesh_with_itself_is_one():
    mesh = to_eval_mesh(generate_asset("chair", "red", seed=1).mesh)
    assert volumetric_iou(mesh, mesh, 48) == 1.0


@pytest.mark.parametrize("shift", [0.25, 0.13, 0.371])
def test_iou_of_shifted_boxes_matches_the_analytic_value(shift):
    overlap = 1.0 - shift
    analytic = overlap / (2.0 - overlap)
    measured = volumetric_iou(box(), box(offset=(shift, 0.0, 0.0)), resolution=64)
    assert measured == pytest.approx(analytic, abs=2 / 64)


def test_overlapping_parts_count_once():
    a = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    b = trimesh.creation.box(extents=(1.0, 1.0, 1.0)).apply_translation((0.5, 0.0, 0.0))
    union = to_eval_mesh(trimesh.util.concatenate([a, b]))
    assert int(occupancy(union, 32).sum()) == 24 * 16 * 16  # 1.5 x 1 x 1 in cells of 1/16


@pytest.mark.parametrize("category", CATEGORIES)
def test_occupancy_agrees_with_the_generalised_winding_number(category):
    mesh = to_eval_mesh(generate_asset(category, "blue", "tall", seed=7).mesh)
    mesh = TorchMesh(mesh.verts * 2, mesh.faces)
    grid = occupancy(mesh, 40)
    cells = torch.randint(0, 40, (400, 3), generator=torch.Generator().manual_seed(0))
    centres = -1 + (cells.float() + 0.5) * (2 / 40)
    inside = winding_number(centres, mesh.verts, mesh.faces) > 0.5
    assert torch.equal(grid[cells[:, 0], cells[:, 1], cells[:, 2]], inside)


def test_a_mesh_open_on_one_side_is_still_filled():
    closed = box()
    # Drop the two faces whose normal points along +z: the top is open, rays along x and y still vote inside.
    tri = closed.verts[closed.faces]
    normal_z = torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1)[:, 2]
    open_top = TorchMesh(closed.verts, closed.faces[normal_z <= 0])
    assert grid_iou(occupancy(open_top, 32), occupancy(closed, 32)) == 1.0


def test_empty_meshes_give_empty_grids_and_zero_iou():
    empty = TorchMesh(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64))
    assert not occupancy(empty, 16).any()
    assert volumetric_iou(empty, box(), 16) == 0.0
    assert volumetric_iou(empty, empty, 16) == 1.0
    assert chamfer_and_color(empty, box()) == {"chamfer": None, "color_error": None}


def test_occupancy_bounds_memory_without_changing_the_result():
    mesh = to_eval_mesh(generate_asset("snowman", "white", seed=2).mesh)
    assert torch.equal(occupancy(mesh, 32), occupancy(mesh, 32, max_pairs=64))


def test_chamfer_of_identical_meshes_is_zero():
    mesh = to_eval_mesh(generate_asset("torus", "red", seed=3).mesh)
    out = chamfer_and_color(mesh, mesh, n_samples=3000)
    assert out["chamfer"] == 0.0 and out["color_error"] == 0.0


def test_chamfer_of_concentric_spheres_is_the_radius_gap():
    small = trimesh.creation.icosphere(subdivisions=4, radius=0.5)
    large = trimesh.creation.icosphere(subdivisions=4, radius=0.6)
    assert chamfer_and_color(small, large, n_samples=4000)["chamfer"] == pytest.approx(0.1, abs=3e-3)


def test_colour_error_is_the_mean_absolute_srgb_difference():
    red = generate_asset("cube", "red", seed=0).mesh
    blue = generate_asset("cube", "blue", seed=0).mesh
    expected = (abs(200 - 30) + abs(30 - 70) + abs(30 - 200)) / 3 / 255
    assert chamfer_and_color(red, blue, n_samples=2000)["color_error"] == pytest.approx(expected, abs=2e-3)


def test_torch_mesh_vertex_colours_become_face_colours():
    verts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    channels = {"R": torch.tensor([0.0, 0.3, 0.6]), "G": torch.zeros(3), "B": torch.ones(3)}
    mesh = to_eval_mesh(TorchMesh(verts, torch.tensor([[0, 1, 2]]), channels))
    assert torch.allclose(mesh.face_colors(), torch.tensor([[0.3, 0.0, 1.0]]))


def test_torch_mesh_face_colours_are_kept_and_uncoloured_meshes_stay_uncoloured():
    verts, faces = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]]), torch.tensor([[0, 1, 2]])
    colored = to_eval_mesh(face_colored_mesh(verts, faces, torch.tensor([[0.2, 0.4, 0.6]])))
    assert torch.equal(colored.face_colors(), torch.tensor([[0.2, 0.4, 0.6]]))
    assert to_eval_mesh(TorchMesh(verts, faces, None, None)).face_colors() is None


def test_asset_mesh_corner_colours_are_averaged_per_face():
    from shap_e.encoding.assets import AssetMesh

    corners = torch.tensor([[[0.0, 0.0, 0.0], [0.3, 0.6, 0.9], [0.6, 0.0, 0.3]]])
    asset = AssetMesh(torch.eye(3), torch.tensor([[0, 1, 2]]), corners, torch.zeros(1, 3, 2),
                      torch.tensor([-1]), [])
    assert torch.allclose(to_eval_mesh(asset).face_colors(), torch.tensor([[0.3, 0.2, 0.4]]))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="resolution"):
        occupancy(box(), resolution=1)
    with pytest.raises(ValueError, match="mesh must be"):
        to_eval_mesh("a mesh")
    with pytest.raises(ValueError, match="same shape"):
        grid_iou(torch.zeros(2, 2, 2, dtype=torch.bool), torch.zeros(3, 3, 3, dtype=torch.bool))


def test_a_mesh_of_zero_area_faces_counts_as_empty():
    flat = TorchMesh(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]))
    assert is_empty(flat) and is_empty(TorchMesh(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64)))
    assert not is_empty(box())
    assert chamfer_and_color(flat, flat) == {"chamfer": None, "color_error": None}
