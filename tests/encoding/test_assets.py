"""Asset loading: formats, scene flattening, normalisation to [-1, 1]^3, up axis and colour sources."""
import numpy as np
import pytest
import torch
import trimesh
from PIL import Image

from shap_e.rendering.color import linear_to_srgb, srgb_to_linear
from shap_e.encoding.assets import DEFAULT_LINEAR_COLOR, load_asset

TEXELS = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 0]]], dtype=np.uint8)


def _bbox(mesh):
    return mesh.verts.amin(dim=0), mesh.verts.amax(dim=0)


def write_textured_obj(folder) -> str:
    """A quad textured with a 2x2 PNG (top row red, green; bottom row blue, yellow) plus a plain green
    triangle from an MTL colour; the quad spans x in [0, 2], y in [0, 1] (OBJ is +Y up)."""
    Image.fromarray(TEXELS).save(folder / "tex.png")
    (folder / "m.mtl").write_text("newmtl tex\nKd 1 1 1\nmap_Kd tex.png\n\nnewmtl plain\nKd 0 0.5 0\n")
    (folder / "m.obj").write_text(
        "mtllib m.mtl\n"
        "v 0 0 0\nv 2 0 0\nv 2 1 0\nv 0 1 0\nv 0 0 -1\n"
        "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
        "usemtl tex\nf 1/1 2/2 3/3\nf 1/1 3/3 4/4\n"
        "usemtl plain\nf 1 2 5\n"
    )
    return str(folder / "m.obj")


def test_box_is_centred_and_scaled_to_largest_extent_two(tmp_path):
    box = trimesh.creation.box(extents=[2.0, 4.0, 1.0])
    box.apply_translation([5.0, -3.0, 7.0])
    box.export(tmp_path / "box.stl")
    mesh = load_asset(str(tmp_path / "box.stl"))
    lo, hi = _bbox(mesh)
    assert torch.allclose(lo, torch.tensor([-0.5, -1.0, -0.25]), atol=1e-6)
    assert torch.allclose(hi, torch.tensor([0.5, 1.0, 0.25]), atol=1e-6)


def test_y_up_assets_are_turned_to_z_up(tmp_path):
    box = trimesh.creation.box(extents=[1.0, 4.0, 2.0])
    box.apply_translation([0.0, 2.0, 1.0])  # the vertex with the largest y also has the largest z
    box.export(tmp_path / "tall.ply")
    as_z = load_asset(str(tmp_path / "tall.ply"))
    as_y = load_asset(str(tmp_path / "tall.ply"), up_axis="y")
    assert torch.allclose(as_z.verts.amax(dim=0), torch.tensor([0.25, 1.0, 0.5]), atol=1e-6)
    assert torch.allclose(as_y.verts.amax(dim=0), torch.tensor([0.25, 0.5, 1.0]), atol=1e-6)
    # (x, y, z) -> (x, -z, y), a rotation (determinant +1), so the winding stays outward.
    assert torch.allclose(as_y.verts, torch.stack([as_z.verts[:, 0], -as_z.verts[:, 2], as_z.verts[:, 1]], 1))


def test_obj_defaults_to_y_up_like_blender(tmp_path):
    path = write_textured_obj(tmp_path)
    mesh = load_asset(path)
    assert torch.equal(mesh.verts, load_asset(path, up_axis="y").verts)
    # The textured quad lies in the OBJ plane z = 0 with y in [0, 1]: upright after the conversion.
    quad = mesh.verts[mesh.faces[mesh.face_texture == 0].flatten()]
    assert torch.allclose(quad[:, 1], quad[:1, 1].expand(len(quad)))
    assert quad[:, 2].amax() - quad[:, 2].amin() == pytest.approx(1.0, abs=1e-6)


def test_scene_nodes_are_flattened_with_their_transforms(tmp_path):
    scene = trimesh.Scene()
    unit = trimesh.creation.box(extents=[1.0, 1.0, 1.0])
    scene.add_geometry(unit, transform=trimesh.transformations.translation_matrix([3.0, 0.0, 0.0]))
    scene.add_geometry(unit.copy(), transform=trimesh.transformations.translation_matrix([-3.0, 0.0, 0.0]))
    scene.export(tmp_path / "two.glb")
    mesh = load_asset(str(tmp_path / "two.glb"), up_axis="z")
    assert mesh.faces.shape[0] == 24
    lo, hi = _bbox(mesh)
    # total extent x = 7 -> scaled to 2; each unit box is 2/7 wide and sits at an end.
    assert torch.allclose(hi - lo, torch.tensor([2.0, 2 / 7, 2 / 7]), atol=1e-6)
    left = mesh.verts[mesh.faces[:12].flatten(), 0]
    assert (left > 0).all() or (left < 0).all()


def test_face_colours_become_linear_corner_colours(tmp_path):
    box = trimesh.creation.box()
    box.visual.face_colors = [255, 128, 0, 255]
    box.export(tmp_path / "box.ply")
    mesh = load_asset(str(tmp_path / "box.ply"))
    expected = srgb_to_linear(torch.tensor([1.0, 128 / 255, 0.0]))
    assert torch.allclose(mesh.corner_colors, expected.expand_as(mesh.corner_colors), atol=1e-6)
    assert (mesh.face_texture == -1).all()


def test_vertex_colours_are_interpolated_in_linear_space(tmp_path):
    sphere = trimesh.creation.icosphere(subdivisions=1)
    rng = np.random.default_rng(0)
    colors = rng.integers(0, 256, size=(len(sphere.vertices), 3), dtype=np.uint8)
    sphere.visual.vertex_colors = np.concatenate([colors, np.full((len(colors), 1), 255, np.uint8)], 1)
    sphere.export(tmp_path / "s.glb")
    mesh = load_asset(str(tmp_path / "s.glb"))
    linear = srgb_to_linear(torch.tensor(colors, dtype=torch.float64) / 255).float()
    faces = torch.tensor(sphere.faces)
    bary = torch.tensor([[0.2, 0.3, 0.5]]).expand(len(faces), 3)
    got = mesh.colors_at(torch.arange(len(faces)), bary)
    assert torch.allclose(got, (linear[faces] * bary[..., None]).sum(1), atol=1e-6)


def test_uncoloured_meshes_get_blenders_default_grey(tmp_path):
    trimesh.creation.box().export(tmp_path / "box.off")
    mesh = load_asset(str(tmp_path / "box.off"))
    assert torch.allclose(mesh.corner_colors, torch.full_like(mesh.corner_colors, DEFAULT_LINEAR_COLOR))


def test_obj_texture_and_mtl_colour_are_read(tmp_path):
    mesh = load_asset(write_textured_obj(tmp_path))
    assert len(mesh.textures) == 1
    textured = (mesh.face_texture == 0).nonzero().squeeze(1)
    plain = (mesh.face_texture == -1).nonzero().squeeze(1)
    assert len(textured) == 2 and len(plain) == 1
    assert torch.allclose(
        mesh.colors_at(plain, torch.full((1, 3), 1 / 3)), srgb_to_linear(torch.tensor([[0.0, 128 / 255, 0.0]]))
    )
    # Points whose uv falls at the centre of each texel: uv (0.25, 0.75) is the top-left texel (red).
    quad_uv = {(0.25, 0.75): TEXELS[0, 0], (0.75, 0.75): TEXELS[0, 1], (0.25, 0.25): TEXELS[1, 0]}
    for (u, v), texel in quad_uv.items():
        face, bary = _face_and_bary_for_uv(mesh, textured, u, v)
        got = mesh.colors_at(face[None], bary[None])[0]
        assert torch.allclose(got, srgb_to_linear(torch.tensor(texel / 255.0, dtype=torch.float32)), atol=1e-6)


def _face_and_bary_for_uv(mesh, faces, u, v):
    """Find the face among `faces` whose UV triangle holds (u, v) and its barycentrics."""
    for face in faces:
        a, b, c = mesh.corner_uvs[face].double()
        m = torch.stack([b - a, c - a], dim=1)
        s, t = torch.linalg.solve(m, torch.tensor([u, v], dtype=torch.float64) - a)
        if s >= 0 and t >= 0 and s + t <= 1:
            return face, torch.tensor([1 - s - t, s, t], dtype=torch.float32)
    raise AssertionError(f"no face holds uv {(u, v)}")


def test_srgb_conversions_invert_each_other():
    u = torch.linspace(0, 1, 257)
    assert torch.allclose(linear_to_srgb(srgb_to_linear(u)), u, atol=1e-6)
    assert srgb_to_linear(torch.tensor(0.5)).item() == pytest.approx(0.21404, abs=1e-5)


def test_bad_arguments_are_reported(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_asset(str(tmp_path / "missing.obj"))
    trimesh.creation.box().export(tmp_path / "box.ply")
    with pytest.raises(ValueError, match="up_axis"):
        load_asset(str(tmp_path / "box.ply"), up_axis="x")


def test_unsupported_format_is_named(tmp_path):
    path = tmp_path / "shape.xyz"
    path.write_text("1 2 3\n")
    with pytest.raises(ValueError, match=r"unsupported asset format '\.xyz'"):
        load_asset(str(path))


def test_mesh_without_faces_is_rejected(tmp_path):
    path = tmp_path / "points.ply"
    trimesh.PointCloud(np.random.default_rng(0).random((10, 3))).export(path)
    with pytest.raises(ValueError, match="contains no triangles"):
        load_asset(str(path))


def test_nan_vertices_drop_their_faces_with_a_warning(tmp_path):
    box = trimesh.creation.box()
    verts = np.vstack([box.vertices, [[np.nan, 0.0, 0.0]]])
    faces = np.vstack([box.faces, [[0, 1, len(verts) - 1]]])
    path = tmp_path / "nan.obj"
    path.write_text(
        "".join(f"v {x} {y} {z}\n" for x, y, z in verts) + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in faces)
    )
    with pytest.warns(UserWarning, match="dropped 1 face"):
        asset = load_asset(str(path))
    assert len(asset.faces) == len(box.faces)
    assert torch.isfinite(asset.verts).all()


def test_missing_texture_falls_back_to_the_material_colour_with_a_warning(tmp_path):
    (tmp_path / "m.mtl").write_text("newmtl red\nKd 1.0 0.0 0.0\nmap_Kd missing.png\n")
    (tmp_path / "m.obj").write_text(
        "mtllib m.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\nusemtl red\nf 1/1 2/2 3/3\n"
    )
    with pytest.warns(UserWarning, match="texture .* could not be loaded"):
        asset = load_asset(str(tmp_path / "m.obj"))
    assert asset.textures == []
    torch.testing.assert_close(asset.corner_colors[0, 0], torch.tensor([1.0, 0.0, 0.0]), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_a_two_million_face_mesh_encodes_with_bounded_memory(tmp_path):
    import resource

    from shap_e.encoding.batch import load_or_create_multimodal_batch

    sphere = trimesh.creation.icosphere(subdivisions=7)  # 327,680 faces
    big = trimesh.util.concatenate([sphere.copy().apply_translation([2.5 * i, 0, 0]) for i in range(7)])
    assert len(big.faces) > 2_000_000
    big.export(tmp_path / "big.ply")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batch = load_or_create_multimodal_batch(
        torch.device("cpu"), model_path=str(tmp_path / "big.ply"), point_count=1024, random_sample_count=2**14,
        mv_light_mode="basic", mv_num_views=2, mv_image_size=64,
    )
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert batch.points.shape == (1, 6, 1024) and batch.view_alphas.sum() > 0
    assert grown_mb < 3000, f"peak memory grew by {grown_mb:.0f} MB"
