"""Multiview renders in the encoder's conventions (docs/behaviour.md#multiview-features): cameras, colours,
alpha and z-depth."""
import math

import pytest
import torch
import trimesh

from shap_e.rendering.rasterize import STF_LIGHT_DIRECTION
from shap_e.rendering.color import linear_to_srgb
from shap_e.encoding.assets import load_asset
from shap_e.encoding.views import BLENDER_DEFAULT_FOV, multiview_cameras, render_multiview


@pytest.fixture
def sphere(tmp_path):
    trimesh.creation.icosphere(subdivisions=3, radius=0.3).export(tmp_path / "s.ply")
    return load_asset(str(tmp_path / "s.ply"))  # radius 1 after normalisation


@pytest.fixture
def red_box(tmp_path):
    box = trimesh.creation.box(extents=[1.0, 0.8, 0.6])
    box.visual.face_colors = [255, 0, 0, 255]
    box.export(tmp_path / "red.ply")
    return load_asset(str(tmp_path / "red.ply"))


def test_cameras_look_at_the_origin_from_distance_four():
    cams = multiview_cameras(20, 32)
    assert cams.shape == (20,) and cams.width == cams.height == 32
    assert cams.x_fov == cams.y_fov == pytest.approx(0.6911112, abs=1e-6) == BLENDER_DEFAULT_FOV
    assert torch.allclose(cams.origin.norm(dim=1), torch.full((20,), 4.0))
    assert torch.allclose(cams.z, -cams.origin / 4, atol=1e-6)
    # Image "up" (-y) points toward world +Z, and the frame is right-handed (x cross y = z).
    assert (-cams.y[:, 2] > 0).all()
    assert torch.allclose(torch.cross(cams.x, cams.y, dim=1), cams.z, atol=1e-6)
    # Evenly spread: the Fibonacci directions have a mean close to zero and distinct elevations.
    assert cams.z.mean(dim=0).norm() < 0.05
    assert len(set(cams.origin[:, 2].tolist())) == 20


def test_sphere_views_have_encoder_shapes_and_ranges(sphere):
    out = render_multiview(sphere, n_views=4, size=33)
    assert out.views.shape == (4, 3, 33, 33)
    assert out.depths.shape == out.alphas.shape == (4, 1, 33, 33)
    assert out.views.min() >= -1 and out.views.max() <= 1
    assert set(out.alphas.unique().tolist()) <= {0.0, 1.0}
    hit = out.alphas.bool()
    assert torch.isfinite(out.depths[hit]).all() and torch.isinf(out.depths[~hit]).all()
    assert (out.views.permute(0, 2, 3, 1)[~hit[:, 0]] == -1).all()
    # The centre pixel sees the nearest point of the unit sphere from distance 4 (the icosphere's
    # faces lie up to 0.5 % inside its circumscribed sphere).
    centre = out.depths[:, 0, 16, 16]
    assert (centre >= 3.0 - 1e-5).all() and (centre <= 3.006).all()
    # Colours are 8-bit values mapped to [-1, 1].
    assert torch.allclose((out.views + 1) * 127.5, ((out.views + 1) * 127.5).round(), atol=1e-3)


def test_depths_back_project_onto_the_surface(sphere):
    """The encoder's step 5 (pos = origin + dir * depth / (dir . z)) must land on the sphere."""
    out = render_multiview(sphere, n_views=3, size=24)
    rays = out.cameras.rays().view(3, 24, 24, 2, 3)
    depth = out.depths[:, 0]
    hit = torch.isfinite(depth)
    dirs = rays[..., 1, :]
    dist = depth / (dirs * out.cameras.z.view(3, 1, 1, 3)).sum(-1)
    pos = rays[..., 0, :] + dist[..., None] * dirs
    radius = pos[hit].norm(dim=-1)
    # An icosphere of 1280 faces is within 0.3 % of its circumscribed unit sphere.
    assert radius.max() <= 1 + 1e-5 and radius.min() > 0.99


def test_red_box_gives_red_pixels_with_basic_lighting(red_box):
    out = render_multiview(red_box, n_views=4, size=32)
    pixels = out.views.permute(0, 2, 3, 1)[out.alphas[:, 0].bool()]
    assert len(pixels) > 500
    assert (pixels[:, 1:] == -1).all()
    # Red = sRGB(1 * (0.3 + 0.7 |n . l|)) for one of the three face normals of the box.
    light = torch.tensor(STF_LIGHT_DIRECTION)
    light = light / light.norm()
    levels = {
        round(float(linear_to_srgb(torch.tensor(0.3 + 0.7 * abs(float(c))))) * 255) / 127.5 - 1
        for c in light
    }
    red = set((pixels[:, 0]).unique().tolist())
    assert all(any(math.isclose(r, lv, abs_tol=1e-4) for lv in levels) for r in red)
    assert len(red) >= 2


def test_white_alpha_removal_fills_the_background_with_white(red_box):
    out = render_multiview(red_box, n_views=2, size=16, alpha_removal="white")
    assert (out.views.permute(0, 2, 3, 1)[~out.alphas[:, 0].bool()] == 1).all()
    with pytest.raises(ValueError, match="alpha_removal"):
        render_multiview(red_box, n_views=2, size=16, alpha_removal="grey")
