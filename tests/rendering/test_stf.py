"""STF mesh extraction pieces (docs/behaviour.md#stf-meshes): grid order, padding, vertex placement,
colour transfer."""
import pytest
import torch

from shap_e.rendering.fields import NeRSTFOutput
from shap_e.rendering.stf import (
    color_meshes,
    grid_points,
    linear_to_srgb,
    meshes_from_fields,
    query_sdf_grid,
    srgb_to_linear,
)
from shap_e.rendering.volume import BoundingBox

BOX = BoundingBox(torch.full((3,), -1.0), torch.full((3,), 1.0))


def _sphere_field(radius: float):
    def field(position, direction, heads):
        sdf = radius - position.norm(dim=-1, keepdim=True)
        values = {"sdf": sdf, "density_fine": sdf.clamp(min=0), "color_stf": (position + 1) / 2}
        return NeRSTFOutput(**{h: values[h] for h in heads})

    return field


def test_grid_points_run_x_slowest_z_fastest_and_span_the_box():
    points = grid_points(torch.arange(27), 3, BOX)
    assert points[0].tolist() == [-1.0, -1.0, -1.0]
    assert points[1].tolist() == [-1.0, -1.0, 0.0]
    assert points[3].tolist() == [-1.0, 0.0, -1.0]
    assert points[9].tolist() == [0.0, -1.0, -1.0]
    assert points[26].tolist() == [1.0, 1.0, 1.0]


def test_sdf_grid_is_padded_with_minus_one_and_independent_of_chunking():
    a = query_sdf_grid(_sphere_field(0.5), 1, 9, BOX, chunk=729, device="cpu")
    b = query_sdf_grid(_sphere_field(0.5), 1, 9, BOX, chunk=50, device="cpu")
    assert a.fields.shape == (1, 11, 11, 11)
    assert torch.equal(a.fields, b.fields)
    border = torch.ones(11, 11, 11, dtype=torch.bool)
    border[1:-1, 1:-1, 1:-1] = False
    assert (a.fields[0][border] == -1).all()
    assert a.raw_signed_distance.shape == (1, 729, 1)
    torch.testing.assert_close(a.fields[0, 5, 5, 5], torch.tensor(0.5))  # centre sample


def test_mesh_vertices_are_placed_on_the_padded_grid_stretched_over_the_box():
    grid = 17
    fields = query_sdf_grid(_sphere_field(0.6), 1, grid, BOX, chunk=4096, device="cpu").fields
    meshes, mask = meshes_from_fields(fields, BOX)
    assert mask.tolist() == [True]
    radii = meshes[0].verts.norm(dim=-1)
    # The sampled sphere of radius 0.6 comes out shrunk by (G - 1) / (G + 1) (docs/behaviour.md#stf-meshes).
    expected = 0.6 * (grid - 1) / (grid + 1)
    assert abs(radii.mean().item() - expected) < 0.01
    assert abs(radii.mean().item() - 0.6) > 0.04


def test_vertex_colours_come_from_the_colour_head_converted_to_linear():
    fields = query_sdf_grid(_sphere_field(0.6), 2, 9, BOX, chunk=4096, device="cpu").fields
    fields[1] = -1.0  # second batch element: no surface -> placeholder mesh
    meshes, mask = meshes_from_fields(fields, BOX)
    assert mask.tolist() == [True, False]
    colored = color_meshes(_sphere_field(0.6), meshes, chunk=7)
    verts = colored[0].verts
    rgb = torch.stack([colored[0].vertex_channels[c] for c in "RGB"], dim=-1)
    torch.testing.assert_close(rgb, srgb_to_linear((verts + 1) / 2), atol=1e-6, rtol=0)
    assert colored[1].vertex_channels["R"].shape == (3,)


def test_srgb_transfer_functions_invert_each_other_and_hit_known_values():
    u = torch.linspace(0, 1, 1001)
    torch.testing.assert_close(linear_to_srgb(srgb_to_linear(u)), u, atol=2e-6, rtol=0)
    torch.testing.assert_close(srgb_to_linear(torch.tensor([0.5])), torch.tensor([0.21404114]), atol=1e-6, rtol=0)
    torch.testing.assert_close(srgb_to_linear(torch.tensor([0.04])), torch.tensor([0.04 / 12.92]), atol=0, rtol=1e-6)


def test_sampled_vertex_placement_puts_the_mesh_on_the_true_surface():
    grid = query_sdf_grid(_sphere_field(0.6), 1, 32, BOX, chunk=4096, device="cpu")
    reference = meshes_from_fields(grid.fields, BOX)[0][0].verts.norm(dim=-1)
    sampled = meshes_from_fields(grid.fields, BOX, vertex_placement="sampled")[0][0].verts.norm(dim=-1)
    # Linear interpolation of a sphere's SDF on a 2/31 grid is within a few thousandths of the radius.
    assert (sampled - 0.6).abs().max() < 0.01
    # The release's placement shrinks the same surface by (G - 1) / (G + 1) about the centre.
    torch.testing.assert_close(reference, sampled * 31 / 33, atol=1e-5, rtol=0)


def test_unknown_vertex_placement_is_a_clear_error():
    grid = query_sdf_grid(_sphere_field(0.6), 1, 8, BOX, chunk=4096, device="cpu")
    with pytest.raises(ValueError, match=r"vertex_placement must be one of \('reference', 'sampled'\)"):
        meshes_from_fields(grid.fields, BOX, vertex_placement="exact")
