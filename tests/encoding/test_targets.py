"""Transmitter supervision: winding-number signs and distances are right on known shapes."""
import pytest
import torch
import trimesh

from shap_e.encoding.targets import asset_targets, nearest_distance, winding_number
from shap_e.encoding.assets import load_asset


def sphere_asset(tmp_path, colour=(255, 0, 0, 255)):
    mesh = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    mesh.visual.vertex_colors = colour
    path = tmp_path / "sphere.ply"
    mesh.export(path)
    return load_asset(str(path))


def test_winding_number_is_one_inside_and_zero_outside_a_closed_mesh(tmp_path):
    asset = sphere_asset(tmp_path)
    points = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.2, -0.1], [0.99, 0.99, 0.99], [-0.95, 0.95, 0.0]])
    w = winding_number(points, asset.verts, asset.faces)
    torch.testing.assert_close(w[:2], torch.ones(2), atol=1e-4, rtol=0)
    torch.testing.assert_close(w[2:], torch.zeros(2), atol=1e-4, rtol=0)


def test_chunked_winding_numbers_and_distances_match_one_block(tmp_path):
    asset = sphere_asset(tmp_path)  # 1,280 faces
    g = torch.Generator().manual_seed(0)
    points = torch.rand(3000, 3, generator=g) * 2.2 - 1.1
    surface = torch.randn(700, 3, generator=g)
    whole = winding_number(points, asset.verts, asset.faces, budget=len(points) * len(asset.faces))
    for budget in (1, 1280 * 7, 1 << 17):  # one point per block, a ragged last block, the default
        w = winding_number(points, asset.verts, asset.faces, budget=budget)
        torch.testing.assert_close(w, whole, atol=1e-5, rtol=0)
        assert torch.equal(w > 0.5, whole > 0.5)
    brute = torch.cdist(points, surface).amin(dim=1)
    for chunk in (1, 333, 512, 4096):
        torch.testing.assert_close(nearest_distance(points, surface, chunk), brute, atol=2e-5, rtol=0)


def test_block_sizes_below_one_are_refused_by_name(tmp_path):
    asset = sphere_asset(tmp_path)
    with pytest.raises(ValueError, match="budget=0"):
        winding_number(torch.zeros(1, 3), asset.verts, asset.faces, budget=0)
    with pytest.raises(ValueError, match="chunk=0"):
        nearest_distance(torch.zeros(1, 3), torch.ones(2, 3), chunk=0)


def test_sdf_targets_match_the_analytic_sphere_and_colours_are_srgb(tmp_path):
    asset = sphere_asset(tmp_path)  # normalised: radius 1 sphere fills [-1, 1]^3
    targets = asset_targets(asset, n_near=512, n_uniform=512, n_color=64, generator=torch.Generator().manual_seed(0))
    analytic = 1.0 - targets.sdf_points.norm(dim=1)  # positive inside
    assert (torch.sign(targets.sdf_values) == torch.sign(analytic))[analytic.abs() > 0.02].all()
    assert (targets.sdf_values - analytic).abs().median() < 0.02
    torch.testing.assert_close(targets.colors, torch.tensor([1.0, 0.0, 0.0]).expand(64, 3), atol=1e-3, rtol=0)


def test_near_points_of_a_box_get_exact_distances_at_every_sigma(tmp_path):
    """Near a flat face the normal offset is the exact distance; sparse surface samples alone
    would overestimate it. Several sigmas split the near points evenly."""
    box = trimesh.creation.box(extents=(1.6, 1.2, 0.8))
    box.visual.vertex_colors = (0, 255, 0, 255)
    path = tmp_path / "box.ply"
    box.export(path)
    asset = load_asset(str(path))
    half = asset.verts.abs().amax(dim=0)  # normalised half extents
    targets = asset_targets(asset, n_near=900, n_uniform=0, n_color=8, sigma=(0.005, 0.05, 0.2), n_surface=512,
                            generator=torch.Generator().manual_seed(0))
    p = targets.sdf_points
    q = p.abs() - half
    outside = q.clamp_min(0).norm(dim=1)
    analytic = torch.where(outside > 0, -outside, -q.max(dim=1).values)  # positive inside
    margin = (half - p.abs()).sort(dim=1).values[:, 1]  # distance to the second-nearest face plane
    small_sigma = torch.arange(900) % 3 < 2
    clamped = p.abs().amax(dim=1) > 0.999  # pushed back into the box: no offset bound
    exact = small_sigma & (margin > 0.25) & ~clamped
    error = (targets.sdf_values - analytic).abs()[exact]
    assert exact.sum() > 150 and error.max() < 1e-4
    # Everywhere else the magnitude is an upper bound with the right sign.
    assert (targets.sdf_values.abs() >= analytic.abs() - 1e-5).all()
    assert (torch.sign(targets.sdf_values) == torch.sign(analytic))[analytic.abs() > 1e-3].all()
    offsets = [(targets.sdf_values[i::3]).abs().median() for i in range(3)]
    assert offsets[0] < 0.006 < offsets[1] < 0.06 < offsets[2]


def test_the_inside_test_of_a_large_mesh_shows_progress(capsys, monkeypatch):
    import trimesh

    import shap_e.encoding.targets as targets

    box = trimesh.creation.box()
    verts, faces = torch.tensor(box.vertices, dtype=torch.float32), torch.tensor(box.faces)
    points = torch.rand(64, 3) * 2 - 1
    quiet = targets.winding_number(points, verts, faces, progress=True)
    assert "inside test" not in capsys.readouterr().err  # 768 pairs: too little work for a bar
    monkeypatch.setattr(targets, "PROGRESS_PAIRS", 100)
    shown = targets.winding_number(points, verts, faces, progress=True)
    assert "inside test" in capsys.readouterr().err and torch.equal(quiet, shown)
