"""`write_ply` is the reference's PLY writer byte for byte (golden g and f)."""
import io

import numpy as np
import pytest

from shap_e.rendering.ply_util import ply_bytes, write_ply


def _mesh_arrays(golden):
    m = golden("g")["inputs"]["trimesh"]
    rgb = np.stack([m["vertex_channels"][c].numpy() for c in "RGB"], axis=1)
    return m["verts"].numpy(), m["faces"].numpy(), rgb


@pytest.mark.parametrize("variant", ["with_colors", "no_colors"])
def test_write_ply_of_the_golden_mesh_is_byte_identical(golden, variant):
    verts, faces, rgb = _mesh_arrays(golden)
    out = io.BytesIO()
    write_ply(out, coords=verts, rgb=rgb if variant == "with_colors" else None, faces=faces)
    assert out.getvalue() == golden("g")["outputs"]["trimesh_files"][variant]["ply_bytes"].numpy().tobytes()


def test_write_ply_of_the_decoded_mesh_is_byte_identical(golden):
    ref = golden("f")["outputs"]["decode_latent_mesh"]
    m = ref["mesh"]
    rgb = np.stack([m["vertex_channels"][c].numpy() for c in "RGB"], axis=1)
    out = io.BytesIO()
    write_ply(out, m["verts"].numpy(), rgb, m["faces"].numpy())
    assert out.getvalue() == ref["ply_bytes"].numpy().tobytes()


def test_faces_are_declared_whenever_given_and_points_have_none():
    verts = np.zeros((2, 3), np.float32)
    assert b"element face 0\n" in ply_bytes(verts, faces=np.zeros((0, 3), np.int64))
    points = ply_bytes(verts)
    assert b"face" not in points and points.endswith(b"end_header\n" + bytes(24))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="coords"):
        ply_bytes(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="rgb"):
        ply_bytes(np.zeros((2, 3)), rgb=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="faces"):
        ply_bytes(np.zeros((2, 3)), faces=np.zeros((1, 4), int))
