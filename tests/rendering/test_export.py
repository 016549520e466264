import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import trimesh

from shap_e.rendering import export
from shap_e.rendering.export import save_mesh, save_textured_glb, save_textured_obj, to_y_up
from shap_e.rendering.mesh import TriMesh
from shap_e.rendering.torch_mesh import TorchMesh

VALIDATOR_SCRIPT = Path(__file__).with_name("validate_gltf.js")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _tall_box() -> TorchMesh:
    """A box 0.2 x 0.4 wide and 2 tall along Shap-E's +Z, coloured by height (linear red = z in [0, 1])."""
    box = trimesh.creation.box(extents=[0.2, 0.4, 2.0])
    verts = torch.tensor(box.vertices, dtype=torch.float32)
    red = (verts[:, 2] + 1) / 2
    channels = {"R": red, "G": torch.full_like(red, 0.25), "B": 1 - red}
    return TorchMesh(verts, torch.tensor(box.faces, dtype=torch.int64), channels)


def _empty() -> TorchMesh:
    return TorchMesh(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.int64))


def _load_single(path: Path) -> trimesh.Trimesh:
    loaded = trimesh.load(path, process=False)
    if isinstance(loaded, trimesh.Scene):
        (loaded,) = loaded.dump()
    return loaded


def _node_env():
    """Environment in which node finds the gltf-validator package, or None.

    Looked up in NODE_PATH, tests/node (where .ci/run installs it: npm install --prefix tests/node
    gltf-validator@2), the repository's node_modules and npm's global root.
    """
    node = shutil.which("node")
    if node is None:
        return None
    paths = [p for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]
    paths += [str(REPO_ROOT / "tests" / "node" / "node_modules"), str(REPO_ROOT / "node_modules")]
    npm = shutil.which("npm")
    if npm is not None:
        result = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=60)
        paths.append(result.stdout.strip())
    env = dict(os.environ, NODE_PATH=os.pathsep.join(paths))
    probe = subprocess.run([node, "-e", "require.resolve('gltf-validator')"], env=env, capture_output=True, timeout=60)
    return env if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def gltf_validator():
    env = _node_env()
    if env is None:
        pytest.skip("needs node and the npm package gltf-validator (npm install --prefix tests/node gltf-validator@2)")

    def validate(*paths):
        result = subprocess.run(
            ["node", str(VALIDATOR_SCRIPT), *map(str, paths)], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode in (0, 1), result.stderr
        return json.loads(result.stdout)

    return validate


def test_ply_with_z_up_is_byte_identical_to_reference_writer(tmp_path, golden):
    m = golden("f")["outputs"]["decode_latent_mesh"]
    mesh = TorchMesh(m["mesh"]["verts"], m["mesh"]["faces"], m["mesh"]["vertex_channels"])
    ply = save_mesh(mesh, tmp_path / "m.ply", up_axis="z")
    obj = save_mesh(mesh, tmp_path / "m.obj", up_axis="z")
    assert ply.read_bytes() == m["ply_bytes"].numpy().tobytes()
    assert obj.read_text() == m["obj_text"]


def test_y_up_rotates_minus_90_degrees_about_x():
    tri = TriMesh(np.array([[1.0, 2.0, 3.0], [0, 0, 1], [0, 1, 0]], np.float32), np.array([[0, 1, 2]]))
    np.testing.assert_array_equal(to_y_up(tri).verts, [[1.0, 3.0, -2.0], [0, 1, 0], [0, 0, -1]])


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_saved_mesh_loads_back_upright_with_its_colors(tmp_path, suffix):
    mesh = _tall_box()
    loaded = _load_single(save_mesh(mesh, tmp_path / f"box{suffix}"))
    extents = loaded.bounds[1] - loaded.bounds[0]
    np.testing.assert_allclose(extents, [0.2, 2.0, 0.4], atol=1e-6)  # tall along +Y
    expected_y = mesh.verts[:, 2].numpy()
    np.testing.assert_allclose(loaded.vertices[:, 1], expected_y, atol=1e-6)
    colors = loaded.visual.vertex_colors[:, :3].astype(np.float32) / 255
    expected = mesh.tri_mesh().vertex_colors()
    np.testing.assert_allclose(colors, expected, atol=1 / 255 + 1e-6)  # linear values, not sRGB


def test_saved_glb_passes_khronos_validator(tmp_path, gltf_validator):
    colored = save_mesh(_tall_box(), tmp_path / "box.glb")
    empty = save_mesh(_empty(), tmp_path / "empty.glb", allow_empty=True)
    reports = gltf_validator(colored, empty)
    for report in reports.values():
        assert report["numErrors"] == 0 and report["numWarnings"] == 0, report["messages"]


def test_unknown_format_raises_value_error_listing_formats(tmp_path):
    with pytest.raises(ValueError, match="ply, obj, glb"):
        save_mesh(_tall_box(), tmp_path / "box.stl")
    with pytest.raises(ValueError, match="'fbx'"):
        save_mesh(_tall_box(), tmp_path / "box.ply", format="fbx")
    with pytest.raises(ValueError, match="up_axis"):
        save_mesh(_tall_box(), tmp_path / "box.ply", up_axis="x")
    assert list(tmp_path.iterdir()) == []


def test_empty_mesh_raises_unless_allowed(tmp_path):
    with pytest.raises(ValueError, match="allow_empty"):
        save_mesh(_empty(), tmp_path / "e.ply")
    assert list(tmp_path.iterdir()) == []
    ply = save_mesh(_empty(), tmp_path / "e.ply", allow_empty=True)
    assert ply.read_bytes().startswith(b"ply\n") and b"element vertex 0\n" in ply.read_bytes()
    assert save_mesh(_empty(), tmp_path / "e.obj", allow_empty=True).read_text() == ""
    glb = save_mesh(_empty(), tmp_path / "e.glb", allow_empty=True).read_bytes()
    assert glb[:4] == b"glTF" and int.from_bytes(glb[8:12], "little") == len(glb)


def test_unwritable_path_raises_os_error_naming_it(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    target = blocker / "mesh.ply"
    with pytest.raises(OSError, match="mesh.ply"):
        save_mesh(_tall_box(), target)
    with pytest.raises(OSError, match="missing"):
        save_mesh(_tall_box(), tmp_path / "missing" / "mesh.glb")


def test_failed_write_leaves_no_file_and_keeps_old_one(tmp_path, monkeypatch):
    target = tmp_path / "box.ply"
    target.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.os, "replace", broken_replace)
    with pytest.raises(OSError, match="box.ply"):
        save_mesh(_tall_box(), target)
    assert [p.name for p in tmp_path.iterdir()] == ["box.ply"]
    assert target.read_bytes() == b"old"


def test_tri_mesh_save_dispatches_on_extension(tmp_path):
    tri = _tall_box().tri_mesh()
    tri.save(tmp_path / "box.obj", up_axis="z")
    assert (tmp_path / "box.obj").read_text() == tri.obj_text()


def _two_coloured_sphere() -> TorchMesh:
    """A unit icosphere of 5,120 faces, linear red above Shap-E's z = 0 and blue below."""
    sphere = trimesh.creation.icosphere(subdivisions=4)
    verts = torch.tensor(sphere.vertices, dtype=torch.float32)
    red = (verts[:, 2] > 0).float()
    channels = {"R": red, "G": torch.zeros_like(red), "B": 1 - red}
    return TorchMesh(verts, torch.tensor(sphere.faces, dtype=torch.int64), channels)


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_max_faces_writes_at_most_that_many_faces_and_keeps_the_colours(tmp_path, suffix):
    loaded = _load_single(save_mesh(_two_coloured_sphere(), tmp_path / f"ball{suffix}", max_faces=500))
    assert 250 < len(loaded.faces) <= 500
    np.testing.assert_allclose(np.linalg.norm(loaded.vertices, axis=1), 1, atol=0.1)  # still the unit sphere
    colors = loaded.visual.vertex_colors[:, :3].astype(np.float32) / 255
    top, bottom = loaded.vertices[:, 1] > 0.2, loaded.vertices[:, 1] < -0.2  # +Y up in the file
    np.testing.assert_allclose(colors[top], np.tile([1, 0, 0], (top.sum(), 1)), atol=1 / 255)
    np.testing.assert_allclose(colors[bottom], np.tile([0, 0, 1], (bottom.sum(), 1)), atol=1 / 255)


def test_max_faces_at_or_above_the_face_count_writes_the_same_file(tmp_path):
    mesh = _two_coloured_sphere()
    plain = save_mesh(mesh, tmp_path / "plain.glb").read_bytes()
    assert save_mesh(mesh, tmp_path / "within.glb", max_faces=len(mesh.faces)).read_bytes() == plain


@pytest.mark.parametrize("bad", [0, 3, -1, 100.0, "500"])
def test_a_bad_max_faces_is_refused_before_any_file_is_written(tmp_path, bad):
    with pytest.raises(ValueError, match="max_faces must be an integer of at least 4"):
        save_mesh(_two_coloured_sphere(), tmp_path / "ball.glb", max_faces=bad)
    assert list(tmp_path.iterdir()) == []


def test_textured_glb_is_decimated_to_max_faces_before_it_is_unwrapped(tmp_path):
    pytest.importorskip("xatlas")
    path = save_textured_glb(_two_coloured_sphere(), tmp_path / "tex.glb", _linear_from_position, texture_size=64,
                             max_faces=300)
    loaded = _load_single(path)
    assert loaded.visual.kind == "texture" and 150 < len(loaded.faces) <= 300


def _linear_from_position(points: torch.Tensor) -> torch.Tensor:
    return ((points + 1) / 2).clamp(0, 1)


def _textured_sphere(tmp_path) -> Path:
    pytest.importorskip("xatlas")
    sphere = trimesh.creation.icosphere(subdivisions=2, radius=0.8)
    mesh = TriMesh(sphere.vertices.astype(np.float32), sphere.faces)
    return save_textured_glb(mesh, tmp_path / "tex.glb", _linear_from_position, texture_size=128)


def test_textured_glb_texture_reproduces_color_fn_at_vertices(tmp_path):
    loaded = _load_single(_textured_sphere(tmp_path))
    assert loaded.visual.kind == "texture"
    image = np.asarray(loaded.visual.material.baseColorTexture.convert("RGB"), dtype=np.float32) / 255
    size = image.shape[0]
    uv = loaded.visual.uv
    cols = np.clip(np.round(uv[:, 0] * size - 0.5).astype(int), 0, size - 1)
    rows = np.clip(np.round((1 - uv[:, 1]) * size - 0.5).astype(int), 0, size - 1)
    srgb = image[rows, cols]
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    v = loaded.vertices
    shap_e_points = torch.tensor(np.stack([v[:, 0], -v[:, 2], v[:, 1]], axis=1), dtype=torch.float32)
    expected = _linear_from_position(shap_e_points).numpy()
    assert np.abs(linear - expected).mean() < 0.01
    assert np.abs(linear - expected).max() < 0.05


def test_textured_obj_writes_mtl_and_png_and_loads_back_as_texture(tmp_path):
    pytest.importorskip("xatlas")
    sphere = trimesh.creation.icosphere(subdivisions=1, radius=0.8)
    mesh = TriMesh(sphere.vertices.astype(np.float32), sphere.faces)
    paths = save_textured_obj(mesh, tmp_path / "ball.obj", _linear_from_position, texture_size=64)
    assert [p.name for p in paths] == ["ball.obj", "ball.mtl", "ball.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ball.mtl", "ball.obj", "ball.png"]
    assert "map_Kd ball.png" in (tmp_path / "ball.mtl").read_text()
    loaded = _load_single(paths[0])
    assert loaded.visual.kind == "texture"
    assert loaded.visual.material.image.size == (64, 64)
    np.testing.assert_allclose(loaded.bounds[1] - loaded.bounds[0], sphere.extents, atol=1e-6)


def test_textured_glb_passes_khronos_validator(tmp_path, gltf_validator):
    path = _textured_sphere(tmp_path)
    report = gltf_validator(path)[str(path)]
    assert report["numErrors"] == 0 and report["numWarnings"] == 0, report["messages"]


def test_textured_glb_without_xatlas_raises_actionable_import_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xatlas", None)
    with pytest.raises(ImportError, match="pip install"):
        save_textured_glb(_tall_box(), tmp_path / "t.glb", _linear_from_position, texture_size=64)
    assert list(tmp_path.iterdir()) == []


def test_textured_glb_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=".glb"):
        save_textured_glb(_tall_box(), tmp_path / "t.ply", _linear_from_position)
    with pytest.raises(ValueError, match="texture_size"):
        save_textured_glb(_tall_box(), tmp_path / "t.glb", _linear_from_position, texture_size=4)
    with pytest.raises(ValueError, match="no faces"):
        save_textured_glb(_empty(), tmp_path / "t.glb", _linear_from_position)


def test_bake_texture_rejects_wrongly_shaped_colors(tmp_path):
    pytest.importorskip("xatlas")
    with pytest.raises(ValueError, match="color_fn"):
        save_textured_glb(_tall_box(), tmp_path / "t.glb", lambda p: p[:, :2], texture_size=32)


def _srgb(linear: np.ndarray) -> np.ndarray:
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * np.maximum(linear, 1e-12) ** (1 / 2.4) - 0.055)


def test_bake_texture_samples_color_fn_at_texel_centres_and_dilates_borders():
    size, padding = 32, 3
    uvs = np.array([[0.1, 0.1], [0.9, 0.1], [0.1, 0.9]], np.float32)
    verts = np.concatenate([uvs, np.zeros((3, 1), np.float32)], axis=1)  # surface point == its uv
    texture = export.bake_texture(verts, np.array([[0, 1, 2]]), uvs, lambda p: p, size, padding=padding)
    rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    u, v = (cols + 0.5) / size, 1 - (rows + 0.5) / size
    inside = (u >= 0.1) & (v >= 0.1) & (u + v <= 1.0)
    expected = np.round(_srgb(np.stack([u, v, np.zeros_like(u)], axis=-1)) * 255)
    np.testing.assert_allclose(texture[inside], expected[inside], atol=1)
    # Texel distance to the triangle (in texels, approximately) decides dilation.
    outside_dist = np.maximum.reduce([(0.1 - u) * size, (0.1 - v) * size, (u + v - 1.0) * size / np.sqrt(2)])
    assert (texture[(outside_dist > 0) & (outside_dist < 1.5)].max(axis=-1) > 0).all()
    assert (texture[outside_dist > padding + 1.5] == 0).all()
