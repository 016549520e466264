"""The official NeRF renderers (`shap_e.models.nerf.renderer`) against golden f and closed forms."""
import math

import pytest
import torch
import torch.nn as nn

from shap_e.models.nerf.model import NeRFModel, VoidNeRFModel
from shap_e.models.nerf.renderer import OneStepNeRFRenderer, TwoStepNeRFRenderer
from shap_e.models.nn.camera import camera_batch
from shap_e.models.volume import BoundingBoxVolume, SphericalVolume
from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras
from shap_e.util.collections import AttrDict

BOX = dict(bbox_min=[-1.0] * 3, bbox_max=[1.0] * 3)


class NeRSTFLevel(nn.Module, NeRFModel):
    """One NeRF level (coarse or fine heads) of golden f's NeRSTF field, as a NeRFModel."""

    def __init__(self, renderer, params, level: str):
        super().__init__()
        self.renderer, self.params, self.level = renderer, params, level
        self.calls = 0

    def forward(self, query, params=None, options=None):
        self.calls += 1
        heads = (f"density_{self.level}", f"color_{self.level}")
        batch, shape = query.position.shape[0], query.position.shape[:-1]
        direction = None if query.direction is None else query.direction.reshape(batch, -1, 3)
        out = self.renderer.nerstf.query(query.position.reshape(batch, -1, 3), self.params, direction, heads)
        return AttrDict(density=getattr(out, heads[0]).view(*shape, 1), channels=getattr(out, heads[1]).view(*shape, 3))


class Homogeneous(nn.Module, NeRFModel):
    """Constant density and colour everywhere."""

    def __init__(self, density: float, color):
        super().__init__()
        self.density, self.color = density, torch.tensor(color)

    def forward(self, query, params=None, options=None):
        shape = query.position.shape[:-1]
        return AttrDict(density=torch.full((*shape, 1), self.density), channels=self.color.expand(*shape, 3))


@pytest.fixture(scope="module")
def golden_field(golden, golden_renderer):
    f = golden("f")
    return golden_renderer, golden_renderer.mlp_params(f["outputs"]["params"]), f


def _golden_cameras(f):
    pan, idx = create_pan_cameras(16), f["inputs"]["nerf_camera_indices_in_pan16"]
    return camera_batch(ProjectiveCamera(origin=pan.origin[idx], x=pan.x[idx], y=pan.y[idx], z=pan.z[idx],
                                         width=16, height=16, x_fov=0.7, y_fov=0.7, shape=(1, 2)))


@pytest.mark.parametrize("name", ["nerf_nodir", "nerf_withdir"])
def test_two_step_renderer_over_the_nerstf_levels_is_the_official_render(golden_field, name):
    renderer, params, f = golden_field
    two_step = TwoStepNeRFRenderer(
        64, 128, VoidNeRFModel(background=[64, 128, 255]), NeRSTFLevel(renderer, params, "fine"),
        BoundingBoxVolume(**BOX), coarse_model=NeRSTFLevel(renderer, params, "coarse"),
    )
    ref = f["outputs"][name]
    torch.manual_seed(ref["args"]["seed"])  # the official draws, in the official order
    with torch.no_grad():
        out = two_step.render_views(AttrDict(cameras=_golden_cameras(f), ray_batch_size=ref["args"]["ray_batch_size"]),
                                    options=AttrDict(render_with_direction=ref["args"]["render_with_direction"]))
    for key in ("channels", "channels_coarse", "transmittance", "transmittance_coarse", "distances",
                "distances_coarse", "depth", "t0", "t1"):
        torch.testing.assert_close(out[key], ref[key], atol=2e-2 if "channels" in key else 1e-4, rtol=0,
                                   msg=lambda m: f"{key}: {m}")
    assert torch.equal(out.intersected, ref["intersected"])


def test_a_shared_model_reuses_the_coarse_samples_in_the_fine_pass(golden_field):
    renderer, params, f = golden_field
    fine = NeRSTFLevel(renderer, params, "fine")
    rays = _golden_cameras(f).flat_camera.camera_rays(torch.zeros(2, 8, 2, dtype=torch.long) + 7).reshape(1, 16, 2, 3)
    shared = TwoStepNeRFRenderer(8, 16, VoidNeRFModel(background=[0, 0, 0]), fine, BoundingBoxVolume(**BOX))
    separate = TwoStepNeRFRenderer(8, 16, VoidNeRFModel(background=[0, 0, 0]), fine, BoundingBoxVolume(**BOX),
                                   coarse_model=fine)
    outs = []
    for two_step in (shared, separate):
        fine.calls = 0
        torch.manual_seed(0)
        with torch.no_grad():
            outs.append(two_step.render_rays(AttrDict(rays=rays)))
        outs[-1].calls = fine.calls
    assert outs[0].calls == outs[1].calls == 2
    torch.testing.assert_close(outs[0].channels, outs[1].channels, atol=1e-4, rtol=0)
    torch.testing.assert_close(outs[0].distances, outs[1].distances, atol=1e-5, rtol=0)


def _rays_along_x(n: int = 3) -> torch.Tensor:
    origin = torch.tensor([-3.0, 0.0, 0.0]).expand(1, n, 3)
    direction = torch.tensor([1.0, 0.0, 0.0]).expand(1, n, 3)
    return torch.stack([origin, direction], dim=-2)


def test_one_step_renders_a_homogeneous_box_in_closed_form():
    density, color, void = 0.7, [1.0, 0.5, 0.0], [0, 0, 255]
    one_step = OneStepNeRFRenderer(32, VoidNeRFModel(background=void), Homogeneous(density, color),
                                   BoundingBoxVolume(**BOX))
    out = one_step.render_rays(AttrDict(rays=_rays_along_x()))
    transmittance = math.exp(-density * 2.0)  # the ray crosses the box from x = -1 to 1
    torch.testing.assert_close(out.transmittance, torch.full((1, 3, 1), transmittance), atol=1e-5, rtol=0)
    expected = (1 - transmittance) * torch.tensor(color) + transmittance * torch.tensor([0.0, 0.0, 1.0])
    torch.testing.assert_close(out.channels, 255 * expected.expand(1, 3, 3), atol=1e-3, rtol=0)
    torch.testing.assert_close(out.t0, torch.full((1, 3, 1), 2.0), atol=1e-5, rtol=0)


def test_an_outer_volume_is_integrated_behind_the_box():
    inner, outer = 0.5, 0.25
    one_step = OneStepNeRFRenderer(
        64, VoidNeRFModel(background=[0, 0, 0]), Homogeneous(inner, [1.0, 0.0, 0.0]), BoundingBoxVolume(**BOX),
        background_model=Homogeneous(outer, [0.0, 1.0, 0.0]), outer_volume=SphericalVolume(radius=2.0),
    )
    out = one_step.render_rays(AttrDict(rays=_rays_along_x(1)))
    # From x = -3 the ray enters the box at 2 and leaves at 4; the sphere part lies behind, 4 to 5.
    transmittance = math.exp(-inner * 2.0 - outer * 1.0)
    torch.testing.assert_close(out.transmittance, torch.full((1, 1, 1), transmittance), atol=1e-5, rtol=0)
    red = 1 - math.exp(-inner * 2.0)
    green = math.exp(-inner * 2.0) * (1 - math.exp(-outer * 1.0))
    torch.testing.assert_close(out.channels[0, 0], 255 * torch.tensor([red, green, 0.0]), atol=1e-3, rtol=0)
    without = one_step.render_rays(AttrDict(rays=_rays_along_x(1)), options=AttrDict(render_background=False))
    torch.testing.assert_close(without.channels[0, 0], 255 * torch.tensor([red, 0.0, 0.0]), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="together"):
        OneStepNeRFRenderer(8, VoidNeRFModel(background=[0, 0, 0]), Homogeneous(1.0, [1.0, 1, 1]),
                            BoundingBoxVolume(**BOX), outer_volume=SphericalVolume(radius=2.0))
