import io

import numpy as np
import pytest
import torch
import trimesh

from shap_e.rendering.mesh import TriMesh
from shap_e.rendering.torch_mesh import TorchMesh


def _golden_small_mesh(golden, colors=True) -> TorchMesh:
    m = golden("g")["inputs"]["trimesh"]
    return TorchMesh(m["verts"], m["faces"], m["vertex_channels"] if colors else None)


def _golden_decoded_mesh(golden) -> TorchMesh:
    m = golden("f")["outputs"]["decode_latent_mesh"]["mesh"]
    return TorchMesh(m["verts"], m["faces"], m["vertex_channels"])


@pytest.mark.parametrize("variant", ["with_colors", "no_colors"])
def test_ply_and_obj_of_small_mesh_are_byte_identical_to_golden(golden, variant):
    ref = golden("g")["outputs"]["trimesh_files"][variant]
    tri = _golden_small_mesh(golden, colors=variant == "with_colors").tri_mesh()
    assert tri.ply_bytes() == ref["ply_bytes"].numpy().tobytes()
    assert tri.obj_text() == ref["obj_text"]


def test_ply_and_obj_of_decoded_mesh_are_byte_identical_to_golden(golden):
    ref = golden("f")["outputs"]["decode_latent_mesh"]
    tri = _golden_decoded_mesh(golden).tri_mesh()
    assert tri.ply_bytes() == ref["ply_bytes"].numpy().tobytes()
    assert tri.obj_text() == ref["obj_text"]


def test_writers_accept_binary_and_text_streams(golden):
    tri = _golden_small_mesh(golden).tri_mesh()
    ply, obj_bytes, obj_text = io.BytesIO(), io.BytesIO(), io.StringIO()
    tri.write_ply(ply)
    tri.write_obj(obj_bytes)
    tri.write_obj(obj_text)
    assert ply.getvalue() == tri.ply_bytes()
    assert obj_bytes.getvalue().decode("utf-8") == obj_text.getvalue() == tri.obj_text()


def test_writers_and_save_take_an_optional_face_budget(golden, tmp_path):
    tri = _golden_decoded_mesh(golden).tri_mesh()  # 37,216 faces
    ply, obj = io.BytesIO(), io.StringIO()
    tri.write_ply(ply, max_faces=2000)
    tri.write_obj(obj, max_faces=2000)
    for loaded in (trimesh.load(io.BytesIO(ply.getvalue()), file_type="ply", process=False),
                   trimesh.load(io.StringIO(obj.getvalue()), file_type="obj", process=False)):
        assert 1000 < len(loaded.faces) <= 2000 and loaded.visual.kind == "vertex"
    arrays = io.BytesIO()
    tri.save(arrays, max_faces=2000)
    arrays.seek(0)
    reloaded = TriMesh.load(arrays)
    assert len(reloaded.faces) <= 2000 and set(reloaded.vertex_channels) == {"R", "G", "B"}
    with pytest.raises(ValueError, match="max_faces"):
        tri.save(tmp_path / "m.glb", max_faces=0)
    assert not (tmp_path / "m.glb").exists()


def test_tri_mesh_converts_tensors_to_numpy_arrays(golden):
    mesh = _golden_small_mesh(golden)
    tri = mesh.tri_mesh()
    assert isinstance(tri.verts, np.ndarray) and tri.verts.dtype == np.float32
    assert tri.faces.dtype == np.int64
    np.testing.assert_array_equal(tri.verts, mesh.verts.numpy())
    np.testing.assert_array_equal(tri.vertex_channels["G"], mesh.vertex_channels["G"].numpy())
    assert tri.has_vertex_colors() and not TorchMesh(mesh.verts, mesh.faces).tri_mesh().has_vertex_colors()


def test_ply_loads_back_in_trimesh_with_same_vertices_and_colors(golden):
    tri = _golden_decoded_mesh(golden).tri_mesh()
    loaded = trimesh.load(io.BytesIO(tri.ply_bytes()), file_type="ply", process=False)
    np.testing.assert_array_equal(np.asarray(loaded.vertices, dtype=np.float32), tri.verts)
    np.testing.assert_array_equal(loaded.faces, tri.faces)
    expected = np.round(tri.vertex_colors() * np.float32(255.499)).astype(np.uint8)
    np.testing.assert_array_equal(loaded.visual.vertex_colors[:, :3], expected)


def test_to_trimesh_keeps_vertex_order_and_linear_colors(golden):
    tri = _golden_small_mesh(golden).tri_mesh()
    mesh = tri.to_trimesh()
    np.testing.assert_allclose(mesh.vertices, tri.verts)
    np.testing.assert_array_equal(mesh.faces, tri.faces)
    np.testing.assert_array_equal(mesh.visual.vertex_colors[:, :3], np.round(tri.vertex_colors() * 255))


def test_out_of_range_colors_are_clipped_in_ply():
    tri = TriMesh(np.zeros((3, 3), np.float32), np.array([[0, 1, 2]]),
                  vertex_channels={"R": np.array([-0.5, 0.5, 1.5], np.float32), "G": np.zeros(3, np.float32),
                                   "B": np.ones(3, np.float32)})
    body = tri.ply_bytes().split(b"end_header\n")[1]
    reds = [body[12 + 15 * i] for i in range(3)]
    assert reds == [0, 128, 255]


@pytest.mark.parametrize(
    "verts, faces, match",
    [
        (np.zeros((3, 2)), np.zeros((1, 3), int), "verts"),
        (np.zeros((3, 3)), np.zeros((1, 4), int), "faces"),
        (np.zeros((3, 3)), np.array([[0, 1, 3]]), "faces index"),
    ],
)
def test_invalid_tri_mesh_raises_value_error(verts, faces, match):
    with pytest.raises(ValueError, match=match):
        TriMesh(verts, faces)


def test_torch_mesh_to_moves_every_tensor():
    mesh = TorchMesh(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]), {"R": torch.zeros(3)}, None)
    moved = mesh.to("cpu")
    assert moved.verts.device.type == "cpu" and moved.vertex_channels["R"].shape == (3,)
    assert moved.face_channels is None


def test_tri_mesh_fields_are_in_the_official_order_with_empty_channel_dicts():
    verts, faces, normals = np.zeros((3, 3), np.float32), np.array([[0, 1, 2]]), np.ones((1, 3), np.float32)
    tri = TriMesh(verts, faces, normals)
    assert tri.normals is normals and tri.vertex_channels == {} and tri.face_channels == {}
    assert not tri.has_vertex_colors()
    assert TorchMesh(torch.zeros(3, 3), torch.tensor([[0, 1, 2]])).vertex_channels == {}


def _full_mesh(golden) -> TriMesh:
    tri = _golden_small_mesh(golden).tri_mesh()
    tri.normals = np.arange(15, dtype=np.float32).reshape(5, 3)
    tri.face_channels = {"id": np.arange(5)}
    return tri


def _assert_same_arrays(a: TriMesh, b: TriMesh):
    assert np.array_equal(a.verts, b.verts) and np.array_equal(a.faces, b.faces) and np.array_equal(a.normals, b.normals)
    for mine, theirs in ((a.vertex_channels, b.vertex_channels), (a.face_channels, b.face_channels)):
        assert mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in mine)


def test_save_and_load_the_official_npz_through_streams_and_paths(golden, tmp_path):
    tri = _full_mesh(golden)
    stream = io.BytesIO()
    assert tri.save(stream) is None
    with np.load(io.BytesIO(stream.getvalue())) as arrays:
        assert sorted(arrays.files) == ["f_id", "faces", "normals", "v_B", "v_G", "v_R", "verts"]
    _assert_same_arrays(TriMesh.load(io.BytesIO(stream.getvalue())), tri)
    path = tri.save(tmp_path / "mesh.npz")  # arrays as they are: up_axis applies to viewer formats
    _assert_same_arrays(TriMesh.load(str(path)), tri)
    empty = TriMesh(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64))
    _assert_same_arrays(TriMesh.load(empty.save(tmp_path / "empty.npz")), TriMesh(empty.verts, empty.faces, None))


def test_save_by_extension_or_format_writes_the_viewer_formats(golden, tmp_path):
    tri = _golden_small_mesh(golden).tri_mesh()
    assert tri.save(tmp_path / "m.ply", up_axis="z").read_bytes() == tri.ply_bytes()
    assert tri.save(tmp_path / "m.obj", up_axis="z").read_text() == tri.obj_text()
    stream = io.BytesIO()
    tri.save(stream, format="ply", up_axis="z")
    assert stream.getvalue() == tri.ply_bytes()
    with pytest.raises(ValueError, match="npz"):
        tri.save(tmp_path / "m.stl")


def test_write_obj_prints_the_stored_values_as_the_reference():
    tri = TriMesh(np.array([[0.1, 0.2, 0.3], [1, 0, 0], [0, 1, 0]], np.float64), np.array([[0, 1, 2]]))
    out = io.StringIO()
    tri.write_obj(out)
    assert out.getvalue().splitlines()[0] == "v 0.1 0.2 0.3"  # float64 kept, not rounded to float32
    assert out.getvalue().endswith("f 1 2 3")


def test_empty_mesh_ply_declares_zero_faces_as_the_reference():
    tri = TriMesh(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64))
    assert tri.ply_bytes().endswith(b"element face 0\nproperty list uchar int vertex_index\nend_header\n")
