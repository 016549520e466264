"""Notebook helpers (docs/behaviour.md#notebook-helpers) with a Transmitter built from golden f's config and
weights."""
import base64
import io
import os
import sys
import types

import numpy as np
import pytest
import torch
import trimesh
from PIL import Image

from shap_e.models.configs import model_from_config
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.util.notebooks import (
    decode_latent_images,
    decode_latent_mesh,
    gif_widget,
    save_gif,
    save_mp4,
    turntable,
    turntable_cameras,
)


@pytest.fixture(scope="module")
def xm_latent(golden):
    f = golden("f")
    xm = model_from_config(f["config"]["transmitter"])
    xm.load_state_dict(f["state_dict"], strict=True)
    return xm.eval(), f["inputs"]["latent"][0], f


def _frames(n=3, size=8):
    return [Image.fromarray(np.full((size, size, 3), 40 * i, dtype=np.uint8)) for i in range(n)]


def _vertex_rows(lines):
    return np.array([[float(x) for x in line.split()[1:]] for line in lines if line.startswith("v")])


def test_decode_latent_mesh_matches_golden_mesh_and_ply_bytes(xm_latent):
    xm, latent, f = xm_latent
    ref = f["outputs"]["decode_latent_mesh"]
    mesh = decode_latent_mesh(xm, latent)
    torch.testing.assert_close(mesh.verts, ref["mesh"]["verts"], atol=1e-4, rtol=0)
    assert torch.equal(mesh.faces, ref["mesh"]["faces"])
    buffer = io.BytesIO()
    mesh.tri_mesh().write_ply(buffer)
    ours_ply, theirs_ply = buffer.getvalue(), bytes(ref["ply_bytes"].numpy())
    # Byte for byte on the AMD EPYC CPUs the goldens came from; on Intel CPUs MKL rounds the field a few
    # ulps apart, so compare the header exactly and the values within the vertex tolerance above.
    header = b"end_header\n"
    assert ours_ply[: ours_ply.index(header)] == theirs_ply[: theirs_ply.index(header)]
    assert len(ours_ply) == len(theirs_ply)
    ours_mesh = trimesh.load(io.BytesIO(ours_ply), file_type="ply", process=False)
    theirs_mesh = trimesh.load(io.BytesIO(theirs_ply), file_type="ply", process=False)
    np.testing.assert_allclose(ours_mesh.vertices, theirs_mesh.vertices, atol=1e-4, rtol=0)
    assert np.array_equal(ours_mesh.faces, theirs_mesh.faces)
    colour_diff = ours_mesh.visual.vertex_colors.astype(int) - theirs_mesh.visual.vertex_colors.astype(int)
    assert np.abs(colour_diff).max() <= 1
    # OBJ text: same lines; colours may differ by a few ulps (torch's pow depends on threads and CPU).
    text = io.StringIO()
    mesh.tri_mesh().write_obj(text)
    ours, theirs = text.getvalue().split("\n"), ref["obj_text"].split("\n")
    assert len(ours) == len(theirs)
    assert [l for l in ours if l.startswith("f")] == [l for l in theirs if l.startswith("f")]
    ours_rows, theirs_rows = _vertex_rows(ours), _vertex_rows(theirs)
    np.testing.assert_allclose(ours_rows[:, :3], theirs_rows[:, :3], atol=1e-4, rtol=0)  # positions
    np.testing.assert_allclose(ours_rows[:, 3:], theirs_rows[:, 3:], atol=1 / 255, rtol=0)  # colours: one 8-bit level


def test_decode_latent_images_stf_gives_pil_views_close_to_the_reference_fallback(xm_latent):
    xm, latent, f = xm_latent
    images = decode_latent_images(xm, latent, create_pan_cameras(16), rendering_mode="stf")
    assert len(images) == 20 and all(im.size == (16, 16) and im.mode == "RGB" for im in images)
    ours = np.stack([np.asarray(im) for im in images]).astype(int)
    reference = f["outputs"]["decode_latent_images_stf16_raycast_fallback"].numpy().astype(int)
    # The reference fallback also hits outside triangles (tests/rendering/test_stf_views.py).
    assert np.abs(ours - reference).mean() < 10
    assert ((ours.max(-1) > 0) == (reference.max(-1) > 0)).mean() > 0.75


@pytest.mark.slow
def test_decode_latent_images_nerf_replays_the_golden_seeded_render(xm_latent):
    xm, latent, f = xm_latent
    torch.manual_seed(901)
    images = decode_latent_images(xm, latent, create_pan_cameras(32), rendering_mode="nerf")
    ours = np.stack([np.asarray(im) for im in images]).astype(int)
    theirs = f["outputs"]["decode_latent_images_nerf32_seed901"].numpy().astype(int)
    # Equal on the AMD EPYC CPUs the goldens came from; on Intel CPUs MKL's rounding may flip a level
    # where a colour sits on an integer.
    assert np.abs(ours - theirs).max() <= 1
    assert (ours != theirs).mean() < 0.01


def test_nerf_images_use_bf16_by_default_only_where_it_is_native_and_pays_off(xm_latent, monkeypatch):
    from shap_e.util import precision

    xm, latent, _ = xm_latent
    cameras = create_pan_cameras(8)

    def render(dtype="auto"):
        generator = torch.Generator().manual_seed(0)
        return np.stack([np.asarray(im) for im in decode_latent_images(
            xm, latent, cameras, "nerf", generator=generator, query_dtype=dtype)])

    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    fp32, bf16 = render(None), render(torch.bfloat16)
    assert not np.array_equal(fp32, bf16)
    assert np.array_equal(render(), fp32)  # golden f's MLP is 16 wide: too narrow for bf16
    monkeypatch.setattr(precision, "AUTO_BF16_MIN_WIDTH", 16)
    assert np.array_equal(render(), bf16)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset({"avx512f"}))
    assert np.array_equal(render(), fp32)


def test_wrong_latents_and_grid_sizes_raise_clear_errors(xm_latent):
    xm, latent, _ = xm_latent
    with pytest.raises(ValueError, match="expects 1536"):
        decode_latent_mesh(xm, latent[:100])
    with pytest.raises(ValueError, match="one flat latent"):
        decode_latent_mesh(xm, latent[None])
    with pytest.raises(ValueError, match="grid_size"):
        decode_latent_mesh(xm, latent, grid_size=4)


def test_turntable_cameras_start_at_the_first_pan_camera_without_repeating_a_frame():
    cams = turntable_cameras(16, n_views=8)
    pan = create_pan_cameras(16)
    assert cams.shape == (1, 8)
    torch.testing.assert_close(cams.origin[0], pan.origin[0])
    torch.testing.assert_close(cams.z[0], pan.z[0])
    assert (cams.origin[1:] - cams.origin[0]).norm(dim=-1).min() > 0.5
    torch.testing.assert_close(cams.origin.norm(dim=-1), torch.full((8,), 4.0))


def test_turntable_renders_one_frame_per_view(xm_latent):
    xm, latent, _ = xm_latent
    frames = turntable(xm, latent, size=8, n_views=4, rendering_mode="stf")
    assert len(frames) == 4 and frames[0].size == (8, 8)


def test_save_gif_writes_every_frame_atomically(tmp_path):
    path = tmp_path / "spin.gif"
    save_gif(_frames(3), path)
    with Image.open(path) as gif:
        assert gif.n_frames == 3 and gif.info["duration"] == 100 and gif.info["loop"] == 0
    assert os.listdir(tmp_path) == ["spin.gif"]
    with pytest.raises(ValueError, match="empty"):
        save_gif([], tmp_path / "none.gif")


def test_gif_widget_embeds_the_animation_as_base64(monkeypatch):
    fake = types.ModuleType("ipywidgets")
    fake.HTML = lambda value: value
    monkeypatch.setitem(sys.modules, "ipywidgets", fake)
    html = gif_widget(_frames(2))
    assert html.startswith('<img src="data:image/gif;base64,') and html.endswith('" />')
    payload = html[len('<img src="data:image/gif;base64,'):-len('" />')]
    with Image.open(io.BytesIO(base64.b64decode(payload))) as gif:
        assert gif.n_frames == 2


def test_optional_dependencies_fail_with_install_hints(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.raises(ImportError, match="pip install ipywidgets"):
        gif_widget(_frames(1))
    monkeypatch.setitem(sys.modules, "imageio", None)
    monkeypatch.setitem(sys.modules, "imageio.v2", None)
    with pytest.raises(ImportError, match="imageio-ffmpeg"):
        save_mp4(_frames(1), tmp_path / "a.mp4")


def test_save_mp4_round_trips_frames_when_imageio_is_installed(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")
    path = tmp_path / "spin.mp4"
    save_mp4(_frames(4, size=16), path)
    assert len(imageio.mimread(path)) == 4
    assert os.listdir(tmp_path) == ["spin.mp4"]


def test_latent_color_fn_matches_the_mesh_vertex_colours(golden):
    from shap_e.models.configs import model_from_config
    from shap_e.util.notebooks import decode_latent_mesh, latent_color_fn

    f = golden("f")
    xm = model_from_config(f["config"]["transmitter"]).eval()
    xm.load_state_dict(f["state_dict"])
    latent = f["inputs"]["latent"][0]
    mesh = decode_latent_mesh(xm, latent, grid_size=16)
    colors = latent_color_fn(xm, latent)(mesh.verts)
    expected = torch.stack([mesh.vertex_channels[c] for c in "RGB"], dim=1)
    torch.testing.assert_close(colors, expected, atol=1e-5, rtol=0)


def test_decode_latent_mesh_fast_mode_equals_exact_mode(golden):
    from shap_e.models.configs import model_from_config
    from shap_e.util.notebooks import decode_latent_mesh

    f = golden("f")
    xm = model_from_config(f["config"]["transmitter"]).eval()
    xm.load_state_dict(f["state_dict"])
    latent = f["inputs"]["latent"][0]
    fast = decode_latent_mesh(xm, latent)
    exact = decode_latent_mesh(xm, latent, mesh_mode="exact")
    assert torch.equal(fast.faces, exact.faces) and torch.equal(fast.verts, exact.verts)
