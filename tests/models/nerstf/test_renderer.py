"""NeRSTFRenderer: config handling, NeRF and STF renders against golden f."""
import copy

import pytest
import torch

from shap_e.models.nerstf.renderer import NeRSTFRenderer, RenderOutput, build_renderer
from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras
from shap_e.rendering.stf import meshes_from_fields, query_sdf_band, query_sdf_grid

NERF_FIELDS = (
    "channels", "transmittance", "depth", "distances", "t0", "t1", "intersected",
    "channels_coarse", "distances_coarse", "transmittance_coarse", "raw_signed_distance", "raw_density",
)


@pytest.fixture(scope="module")
def setup(golden):
    f = golden("f")
    renderer = build_renderer(f["config"]["transmitter"]["renderer"])
    prefix = "renderer."
    renderer.load_state_dict({k[len(prefix):]: v for k, v in f["state_dict"].items() if k.startswith(prefix)}, strict=True)
    return renderer, f["outputs"]["params"], f


def _golden_nerf_cameras(f) -> ProjectiveCamera:
    pan = create_pan_cameras(16)
    idx = f["inputs"]["nerf_camera_indices_in_pan16"]
    return ProjectiveCamera(
        origin=pan.origin[idx], x=pan.x[idx], y=pan.y[idx], z=pan.z[idx],
        width=16, height=16, x_fov=0.7, y_fov=0.7, shape=(1, 2),
    )


def test_built_renderer_has_exactly_the_checkpoint_keys(golden):
    f = golden("f")
    renderer = build_renderer(f["config"]["transmitter"]["renderer"])
    expected = {k[len("renderer."):] for k in f["state_dict"] if k.startswith("renderer.")}
    assert set(renderer.state_dict()) == expected
    assert renderer.grid_size == 32
    torch.testing.assert_close(renderer.void.background, torch.tensor([64.0, 128.0, 255.0]) / 255)


def test_config_errors_list_valid_keys_and_reject_unsupported_values(golden):
    config = golden("f")["config"]["transmitter"]["renderer"]
    with pytest.raises(ValueError, match="valid keys"):
        build_renderer({**config, "n_samples": 3})
    with pytest.raises(ValueError, match="valid keys"):
        build_renderer({**config, "nerstf": {**config["nerstf"], "width": 3}})
    with pytest.raises(ValueError, match="activation"):
        build_renderer({**config, "nerstf": {**config["nerstf"], "activation": "relu"}})
    with pytest.raises(ValueError, match="grid_size"):
        build_renderer({**config, "grid_size": 4})


def test_meta_device_builds_without_memory(golden):
    renderer = build_renderer(golden("f")["config"]["transmitter"]["renderer"], device="meta")
    assert renderer.nerstf.mlp[5].weight.is_meta


def _nerf_atol(field: str) -> float:
    """Tolerance of a NeRF render field against golden f: 1e-4 holds on the AMD EPYC CPUs the goldens
    came from. On Intel CPUs MKL rounds exp and pow differently: colours (0..255) then get the golden README's
    acceptance for NeRF renders, 2e-2 (measured 1.5e-4), and raw signed distances 5e-3 (measured 4e-3 at
    3 of 98,304 samples, where the view-dependent samples sit on a steep part of the field)."""
    return {"channels": 2e-2, "raw_signed_distance": 5e-3}.get(field, 1e-4)


def _assert_field_close(value: torch.Tensor, reference: torch.Tensor, field: str) -> None:
    torch.testing.assert_close(value, reference, atol=_nerf_atol(field), rtol=0, msg=lambda m: f"{field}: {m}")


def _assert_images_within_a_level(channels: torch.Tensor, images_uint8: torch.Tensor) -> None:
    """Truncation to uint8 may flip a level where a value sits on an integer."""
    images = channels.clamp(0, 255).to(torch.uint8).int()
    assert (images - images_uint8.int()).abs().max() <= 1


@pytest.mark.parametrize("name, query_batch_size", [("nerf_nodir", None), ("nerf_withdir", None), ("nerf_nodir", 1000)])
def test_nerf_render_replaying_the_reference_queries_matches_golden(setup, name, query_batch_size):
    renderer, params, f = setup
    ref = f["outputs"][name]
    torch.manual_seed(ref["args"]["seed"])
    with torch.no_grad():
        out = renderer.render_cameras(
            _golden_nerf_cameras(f), params, rendering_mode="nerf",
            render_with_direction=ref["args"]["render_with_direction"], ray_batch_size=ref["args"]["ray_batch_size"],
            query_batch_size=query_batch_size, reference_queries=True,
        )
    assert isinstance(out, RenderOutput)
    for field in NERF_FIELDS:
        value = getattr(out, field)
        assert value.shape == ref[field].shape, field
        if field == "intersected":
            assert torch.equal(value, ref[field])
        else:
            _assert_field_close(value, ref[field], field)
    _assert_images_within_a_level(out.channels, ref["images_uint8"])


@pytest.mark.parametrize("name", ["nerf_nodir", "nerf_withdir"])
def test_nerf_render_with_fewer_queries_matches_golden_within_float_noise(setup, name):
    renderer, params, f = setup
    ref = f["outputs"][name]
    torch.manual_seed(ref["args"]["seed"])
    with torch.no_grad():
        out = renderer.render_cameras(
            _golden_nerf_cameras(f), params, rendering_mode="nerf",
            render_with_direction=ref["args"]["render_with_direction"], ray_batch_size=ref["args"]["ray_batch_size"],
        )
    hit = ref["intersected"][..., 0]
    for field in NERF_FIELDS:
        if field in ("raw_signed_distance", "raw_density"):
            # Rays that miss the box are not queried: their raw outputs read 0.
            _assert_field_close(getattr(out, field)[hit], ref[field][hit], field)
            assert (getattr(out, field)[~hit] == 0).all()
        elif field != "intersected":
            _assert_field_close(getattr(out, field), ref[field], field)
    _assert_images_within_a_level(out.channels, ref["images_uint8"])


def test_nerf_accepts_a_ray_batch_size_that_does_not_divide_the_pixel_count(setup):
    renderer, params, f = setup
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        out = renderer.render_cameras(
            _golden_nerf_cameras(f), params, rendering_mode="nerf", ray_batch_size=100, generator=generator
        )
    ref = f["outputs"]["nerf_nodir"]
    assert out.channels.shape == (1, 2, 16, 16, 3)
    # Deterministic quantities do not depend on the chunking; colours stay close to the golden ones.
    torch.testing.assert_close(out.t1, ref["t1"], atol=1e-6, rtol=0)
    assert (out.channels - ref["channels"]).abs().mean() < 5.0


def test_stf_render_reproduces_golden_grid_mesh_and_colours(setup):
    renderer, params, f = setup
    ref = f["outputs"]["stf"]
    with torch.no_grad():
        out = renderer.render_cameras(create_pan_cameras(2), params, rendering_mode="stf", mesh_mode="exact")
    torch.testing.assert_close(out.fields, ref["fields_padded"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.raw_signed_distance, ref["raw_signed_distance"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.raw_density, ref["raw_density"], atol=1e-5, rtol=0)
    assert torch.equal(out.mesh_mask, ref["mesh_mask"])
    mesh = out.meshes[0]
    torch.testing.assert_close(mesh.verts, ref["mesh"]["verts"], atol=1e-4, rtol=0)
    assert torch.equal(mesh.faces, ref["mesh"]["faces"])
    for c in "RGB":
        # 1e-6 on the AMD EPYC CPUs the goldens came from; on Intel CPUs MKL's pow moves a few colours
        # by up to 4.3e-5.
        torch.testing.assert_close(mesh.vertex_channels[c], ref["mesh"]["vertex_channels"][c], atol=1e-4, rtol=0)
    assert out.channels.shape == (1, 20, 2, 2, 3) and out.transmittance.shape == (1, 20, 2, 2, 1)


def test_fast_mesh_mode_gives_the_exact_modes_mesh_bit_for_bit_on_golden_f(setup):
    renderer, params, f = setup
    with torch.no_grad():
        fast = renderer.extract_mesh(params)[0]
        exact = renderer.extract_mesh(params, mesh_mode="exact")[0]
    assert torch.equal(fast.verts, exact.verts) and torch.equal(fast.faces, exact.faces)
    for c in "RGB":
        assert torch.equal(fast.vertex_channels[c], exact.vertex_channels[c])
    torch.testing.assert_close(fast.verts, f["outputs"]["stf"]["mesh"]["verts"], atol=1e-4, rtol=0)


def test_bfloat16_queries_stay_close_to_the_float32_field(setup):
    renderer, params, _ = setup
    with torch.no_grad():
        full = renderer.render_cameras(create_pan_cameras(2), params, mesh_mode="exact")
        half = renderer.render_cameras(create_pan_cameras(2), params, mesh_mode="exact", query_dtype=torch.bfloat16)
    assert half.raw_signed_distance.dtype == torch.float32
    error = (half.raw_signed_distance - full.raw_signed_distance).abs()
    # Golden f is a random (noisy) field: bf16 rounding of 256-wide sums moves it by ~1% on average.
    assert 0 < error.max() < 0.2 and error.mean() < 0.02


def test_bfloat16_nerf_images_stay_within_a_level_of_float32_on_average(setup):
    renderer, params, _ = setup
    cameras = create_pan_cameras(32)
    with torch.no_grad():
        images = [
            renderer.render_cameras(cameras, params, rendering_mode="nerf", generator=torch.Generator().manual_seed(0),
                                  query_dtype=dtype).channels.clamp(0, 255).to(torch.uint8).float()
            for dtype in (None, torch.bfloat16)
        ]
    diff = (images[1] - images[0]).abs()
    # Measured on this noisy random field: mean 0.40 levels, 0.19 % of pixels more than 4 levels off.
    assert 0 < diff.mean() < 1.0 and (diff > 4).float().mean() < 0.01


def test_a_forced_band_on_golden_f_evaluates_every_sample_exactly_as_the_full_grid(setup):
    # Golden f's field is noise, so the default gives the band up; forced, it must still agree.
    renderer, params, _ = setup
    field = renderer.field(params)
    with torch.no_grad():
        band = query_sdf_band(field, 1, 32, renderer.box, 4096, "cpu", max_fraction=1.0)
        full = query_sdf_grid(field, 1, 32, renderer.box, 4096, "cpu")
    assert band.band.rounds >= 1 and band.band.evaluated == 32**3
    assert torch.equal(band.fields, full.fields)
    band_mesh = meshes_from_fields(band.fields, renderer.box)[0][0]
    full_mesh = meshes_from_fields(full.fields, renderer.box)[0][0]
    assert torch.equal(band_mesh.verts, full_mesh.verts) and torch.equal(band_mesh.faces, full_mesh.faces)


@pytest.mark.parametrize("mesh_mode", ["fast", "exact"])
def test_extract_mesh_does_not_depend_on_the_query_chunk_size(setup, mesh_mode):
    renderer, params, _ = setup
    with torch.no_grad():
        a = renderer.extract_mesh(params, query_batch_size=32768, mesh_mode=mesh_mode)[0]
        b = renderer.extract_mesh(params, query_batch_size=1024, mesh_mode=mesh_mode)[0]
    assert torch.equal(a.verts, b.verts) and torch.equal(a.faces, b.faces)
    assert torch.equal(a.vertex_channels["R"], b.vertex_channels["R"])


def test_an_empty_field_gives_the_placeholder_mesh_and_a_blank_image(setup):
    renderer, params, _ = setup
    empty = copy.deepcopy(renderer)
    with torch.no_grad():
        empty.nerstf.mlp[6].weight.zero_()
        empty.nerstf.mlp[6].bias.fill_(-1.0)  # SDF = tanh(-1) < 0 everywhere: nothing inside
        out = empty.render_cameras(create_pan_cameras(4), params, rendering_mode="stf")
    assert out.mesh_mask.tolist() == [False]
    mesh = out.meshes[0]
    assert mesh.faces.tolist() == [[0, 1, 2]]
    torch.testing.assert_close(mesh.verts, torch.full((3, 3), out.fields[0].mean().item()))
    assert out.channels.abs().max() == 0 and out.transmittance.min() == 1


def test_bad_arguments_raise_before_rendering(setup):
    renderer, params, f = setup
    cameras = create_pan_cameras(2)
    with pytest.raises(ValueError, match="rendering_mode"):
        renderer.render_cameras(cameras, params, rendering_mode="mesh")
    with pytest.raises(ValueError, match="lacks"):
        renderer.render_cameras(cameras, {}, rendering_mode="stf")
    with pytest.raises(ValueError, match="batch size"):
        renderer.render_cameras(cameras.reshape(20), params, rendering_mode="stf")
    with pytest.raises(ValueError, match="grid_size"):
        renderer.extract_mesh(params, grid_size=7)
    with pytest.raises(ValueError, match="mesh_mode"):
        renderer.extract_mesh(params, mesh_mode="approximate")
    with pytest.raises(ValueError, match="rasterizer"):
        renderer.render_cameras(cameras, params, rasterizer="opengl")
    assert isinstance(renderer, NeRSTFRenderer)
