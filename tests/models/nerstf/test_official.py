"""`NeRSTFRenderer.render_views(batch, params, options)`, the official AttrDict boundary, against golden f."""
from dataclasses import dataclass

import pytest
import torch

from shap_e.models.nn.camera import DifferentiableCamera, DifferentiableCameraBatch, camera_batch
from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.util.collections import AttrDict

NERF_KEYS = {
    "channels", "transmittance", "depth", "distances", "t0", "t1", "intersected", "channels_coarse",
    "distances_coarse", "transmittance_coarse", "raw_signed_distance", "raw_density",
}
# Float noise of golden f's NeRF renders across CPUs (tests/models/nerstf/test_renderer.py).
ATOL = {"channels": 2e-2, "channels_coarse": 2e-2, "raw_signed_distance": 5e-3}


@pytest.fixture(scope="module")
def setup(golden, golden_renderer):
    f = golden("f")
    return golden_renderer, f["outputs"]["params"], f


def _cameras(f) -> DifferentiableCameraBatch:
    pan, idx = create_pan_cameras(16), f["inputs"]["nerf_camera_indices_in_pan16"]
    return camera_batch(ProjectiveCamera(
        origin=pan.origin[idx], x=pan.x[idx], y=pan.y[idx], z=pan.z[idx],
        width=16, height=16, x_fov=0.7, y_fov=0.7, shape=(1, 2),
    ))


def _nerf(renderer, params, f, name, **options):
    ref = f["outputs"][name]
    torch.manual_seed(ref["args"]["seed"])
    with torch.no_grad():
        return renderer.render_views(
            AttrDict(cameras=_cameras(f), ray_batch_size=ref["args"]["ray_batch_size"]), params=params,
            options=AttrDict(rendering_mode="nerf", **options),
        ), ref


@pytest.mark.parametrize("name", ["nerf_nodir", "nerf_withdir"])
def test_nerf_views_are_the_official_outputs(setup, name):
    renderer, params, f = setup
    out, ref = _nerf(renderer, params, f, name, render_with_direction=ref_direction(f, name),
                     reference_queries=True)
    assert isinstance(out, AttrDict) and set(out) == NERF_KEYS | {"aux_losses"} and out.aux_losses == {}
    for key in NERF_KEYS:
        assert out[key].shape == ref[key].shape, key
        if key == "intersected":
            assert torch.equal(out[key], ref[key])
        else:
            torch.testing.assert_close(out[key], ref[key], atol=ATOL.get(key, 1e-4), rtol=0, msg=lambda m: f"{key}: {m}")
    images = out.channels.clamp(0, 255).to(torch.uint8).int()
    assert (images - ref["images_uint8"].int()).abs().max() <= 1


def ref_direction(f, name) -> bool:
    return f["outputs"][name]["args"]["render_with_direction"]


def test_nerf_renders_with_direction_by_default_as_the_official_renderer(setup):
    renderer, params, f = setup
    out, ref = _nerf(renderer, params, f, "nerf_withdir")
    torch.testing.assert_close(out.channels, ref["channels"], atol=2e-2, rtol=0)
    hit = ref["intersected"][..., 0]
    assert (out.raw_density[~hit] == 0).all()  # without reference_queries, rays that miss are not queried
    torch.testing.assert_close(out.raw_density[hit], ref["raw_density"][hit], atol=1e-4, rtol=0)


def test_stf_views_carry_the_official_raw_meshes_fields_and_loss(setup):
    renderer, params, f = setup
    ref = f["outputs"]["stf"]
    with torch.no_grad():
        out = renderer.render_views(AttrDict(cameras=camera_batch(create_pan_cameras(2))), params=params)
    assert isinstance(out.raw_meshes[0], TorchMesh) and len(out.raw_meshes) == 1
    assert torch.equal(out.raw_meshes[0].faces, ref["mesh"]["faces"])
    torch.testing.assert_close(out.raw_meshes[0].verts, ref["mesh"]["verts"], atol=1e-4, rtol=0)
    torch.testing.assert_close(out.fields, ref["fields_padded"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.raw_signed_distance, ref["raw_signed_distance"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.raw_density, ref["raw_density"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.aux_losses.cross_entropy, ref["cross_entropy_aux_loss"], atol=1e-5, rtol=0)
    assert out.channels.shape == (1, 20, 2, 2, 3) and out.transmittance.shape == (1, 20, 2, 2, 1)
    with torch.no_grad():
        fast = renderer.render_views(AttrDict(cameras=camera_batch(create_pan_cameras(2))), params=params,
                                     options=AttrDict(mesh_mode="fast"))
    assert torch.equal(fast.raw_meshes[0].faces, out.raw_meshes[0].faces)


def test_unknown_options_are_refused_by_name(setup):
    renderer, params, f = setup
    with pytest.raises(ValueError, match=r"\['n_samples'\].*valid options"):
        renderer.render_views(AttrDict(cameras=_cameras(f)), params=params, options=AttrDict(n_samples=3))
    with pytest.raises(ValueError, match="rendering_mode"):
        renderer.render_views(AttrDict(cameras=_cameras(f)), params=params, options=AttrDict(rendering_mode="mesh"))


def test_without_params_the_stored_meta_weights_are_rendered(setup):
    renderer, params, f = setup
    stored = {f"nerstf.{k}": renderer.nerstf.get_buffer(k)[None] for k in renderer.nerstf.meta_parameter_shapes()}
    batch, options = AttrDict(cameras=_cameras(f)), AttrDict(rendering_mode="nerf", render_with_direction=False)
    torch.manual_seed(0)
    without = renderer.render_views(batch, options=options)
    torch.manual_seed(0)
    explicit = renderer.render_views(batch, params=stored, options=options)
    assert torch.equal(without.channels, explicit.channels)


def test_without_background_empty_pixels_are_black(setup):
    renderer, params, f = setup
    out, ref = _nerf(renderer, params, f, "nerf_nodir", render_with_direction=False, render_background=False)
    empty = ~ref["intersected"][..., 0]
    assert empty.any() and (out.channels[empty] == 0).all()
    assert (ref["channels"][empty] > 0).all()  # golden f's void is coloured


def test_render_rays_is_the_per_ray_pass_of_render_views(setup):
    renderer, params, f = setup
    cameras = _cameras(f).flat_camera
    rays = cameras.camera_rays(cameras.image_coords()[None].expand(2, -1, -1)).reshape(1, 512, 2, 3)
    ref = f["outputs"]["nerf_withdir"]
    torch.manual_seed(ref["args"]["seed"])
    with torch.no_grad():
        out = renderer.render_rays(AttrDict(rays=rays), params=params, options=AttrDict(reference_queries=True))
    torch.testing.assert_close(out.channels, ref["channels"].reshape(1, 512, 3), atol=2e-2, rtol=0)
    assert set(out) == NERF_KEYS - {"depth"} | {"aux_losses"}
    with pytest.raises(ValueError, match="batch.rays"):
        renderer.render_rays(AttrDict(rays=rays[0]), params=params)


@dataclass
class OrthographicCamera(DifferentiableCamera):
    """Parallel rays along -Z from a 1 x 1 square above the box: a camera the package does not know."""

    size: int = 4

    def camera_rays(self, coords):
        xy = (coords.float() / (self.size - 1) * 2 - 1) * 0.5
        origin = torch.cat([xy, torch.full_like(xy[..., :1], 3.0)], dim=-1)
        direction = torch.zeros_like(origin) + torch.tensor([0.0, 0.0, -1.0])
        return torch.stack([origin, direction], dim=-2)

    def resize_image(self, width, height):
        return OrthographicCamera(width)

    @property
    def width(self):
        return self.size

    @property
    def height(self):
        return self.size


def test_other_camera_kinds_render_in_nerf_mode_through_their_rays(setup):
    renderer, params, _ = setup
    cameras = DifferentiableCameraBatch(shape=(1, 1), flat_camera=OrthographicCamera())
    torch.manual_seed(0)
    out = renderer.render_views(AttrDict(cameras=cameras), params=params, options=AttrDict(rendering_mode="nerf"))
    assert out.channels.shape == (1, 1, 4, 4, 3) and "depth" not in out
    assert (out.t0 - 2.0).abs().max() < 1e-5  # every ray enters the box at z = 1
    with pytest.raises(TypeError, match="projective"):
        renderer.render_views(AttrDict(cameras=cameras), params=params)
