"""Narrow-band SDF evaluation: the same mesh as the full grid, from a fraction of the queries."""
import pytest
import torch
import torch.nn.functional as F

from shap_e.rendering.marching_cubes import marching_cubes
from shap_e.rendering.sdf_band import coarse_indices, evaluate_band


def _grid_sampler(fn, grid_size: int, calls: list):
    """A `SampleFn` of `fn(points [n, 3]) -> [n]` on the grid spanning [-1, 1]^3; logs query sizes."""

    def sample(index):
        calls.append(len(index))
        ijk = torch.stack([index // grid_size**2, (index // grid_size) % grid_size, index % grid_size], dim=1)
        return fn(ijk.double() / (grid_size - 1) * 2 - 1)[None].float()

    return sample


def _sphere(center, radius):
    return lambda p: radius - (p - torch.tensor(center, dtype=p.dtype)).norm(dim=-1)


def _box(half):
    def fn(p):
        q = p.abs() - half
        return -(q.clamp(min=0).norm(dim=-1) + q.max(dim=-1).values.clamp(max=0))

    return fn


def _torus(p):
    ring = torch.stack([p[:, :2].norm(dim=-1) - 0.55, p[:, 2]], dim=-1)
    return 0.2 - ring.norm(dim=-1)


def _two_spheres(p):
    return torch.maximum(_sphere((0.3, 0.1, -0.2), 0.45)(p), _sphere((-0.62, -0.6, 0.55), 0.07)(p))


def _mesh(cube):
    padded = F.pad(cube, (1, 1, 1, 1, 1, 1), value=-1.0)
    return marching_cubes(padded, torch.full((3,), -1.0), torch.full((3,), 2.0))


@pytest.mark.parametrize("name, fn", [
    ("sphere", _sphere((0.05, -0.1, 0.0), 0.6)), ("box", _box(0.5)), ("torus", _torus),
    ("two spheres, one tiny", _two_spheres), ("sphere leaving the box", _sphere((0.5, 0.0, 0.0), 0.7)),
])
@pytest.mark.parametrize("grid_size", [48, 61])
def test_band_mesh_is_identical_to_the_full_grid_mesh(name, fn, grid_size):
    full = _grid_sampler(fn, grid_size, [])(torch.arange(grid_size**3)).view(1, *(grid_size,) * 3)
    calls = []
    band, stats = evaluate_band(_grid_sampler(fn, grid_size, calls), 1, grid_size, "cpu", max_fraction=1.0)
    expected, got = _mesh(full[0]), _mesh(band[0])
    assert expected.faces.shape[0] > 0
    assert torch.equal(got.verts, expected.verts) and torch.equal(got.faces, expected.faces)
    assert stats.evaluated == sum(calls) < 0.75 * grid_size**3


def test_band_values_are_exact_where_evaluated_and_signed_elsewhere():
    fn, g = _sphere((0.0, 0.0, 0.0), 0.5), 40
    full = _grid_sampler(fn, g, [])(torch.arange(g**3)).view(g, g, g)
    band, _ = evaluate_band(_grid_sampler(fn, g, []), 1, g, "cpu", max_fraction=1.0)
    exact = band[0] == full
    assert ((band[0] > 0) == (full > 0)).all()
    assert (band[0][~exact].abs() == 1).all()
    assert exact.sum() < 0.75 * g**3


def test_a_surface_cut_off_by_a_zero_margin_is_traced_into_neighbouring_cells():
    # Coarse samples every 0.5: the ball holds the corners at x = 0 of one cell only but bulges
    # past x = 0.5 into the next cell, none of whose corners it holds.
    fn, g = _sphere((0.15, 0.25, 0.25), 0.47), 33
    full = _grid_sampler(fn, g, [])(torch.arange(g**3)).view(g, g, g)
    band, stats = evaluate_band(_grid_sampler(fn, g, []), 1, g, "cpu", coarse_step=8, margin=0.0, max_fraction=1.0)
    got, expected = _mesh(band[0]), _mesh(full)
    assert stats.rounds > 1
    assert torch.equal(got.verts, expected.verts) and torch.equal(got.faces, expected.faces)


def test_a_blob_hidden_inside_one_coarse_cell_needs_the_margin():
    # The guarantee's limit: with no margin a blob that touches no coarse sample is not seen.
    fn, g = _sphere((0.0625, 0.0625, 0.0625), 0.04), 33
    without, _ = evaluate_band(_grid_sampler(fn, g, []), 1, g, "cpu", coarse_step=8, margin=0.0, max_fraction=1.0)
    with_margin, _ = evaluate_band(_grid_sampler(fn, g, []), 1, g, "cpu", coarse_step=8, max_fraction=1.0)
    assert _mesh(without[0]).faces.shape[0] == 0
    assert _mesh(with_margin[0]).faces.shape[0] > 0


def test_coarse_indices_always_include_both_ends():
    assert coarse_indices(9, 4).tolist() == [0, 4, 8]
    assert coarse_indices(10, 4).tolist() == [0, 4, 8, 9]


def test_bad_band_options_are_rejected():
    with pytest.raises(ValueError, match="coarse_step"):
        evaluate_band(lambda i: torch.zeros(1, len(i)), 1, 16, "cpu", coarse_step=1)


def test_a_band_covering_most_of_the_grid_is_given_up():
    noise = torch.Generator().manual_seed(0)
    values = torch.rand(20**3, generator=noise) - 0.5
    band, stats = evaluate_band(lambda i: values[i][None], 1, 20, "cpu")
    assert band is None and stats.rounds == 0 and stats.evaluated == coarse_indices(20, 4).numel() ** 3
