"""Decimation to a face budget keeps the shape and the vertex colours, and refuses bad budgets."""
import numpy as np
import pytest
import trimesh

from shap_e.rendering.decimate import decimate
from shap_e.rendering.mesh import TriMesh


def coloured_sphere() -> TriMesh:
    sphere = trimesh.creation.icosphere(subdivisions=5)  # 20,480 faces, radius 1
    verts = sphere.vertices.astype(np.float32)
    red = (verts[:, 2] > 0).astype(np.float32)  # the top half red, the bottom half blue
    return TriMesh(verts=verts, faces=sphere.faces.astype(np.int64),
                   vertex_channels={"R": red, "G": np.zeros_like(red), "B": 1 - red})


@pytest.mark.parametrize("max_faces", [5000, 1000, 100])
def test_decimation_meets_the_budget_and_keeps_the_shape(max_faces):
    mesh = decimate(coloured_sphere(), max_faces)
    assert 0.5 * max_faces < len(mesh.faces) <= max_faces
    radius = np.linalg.norm(mesh.verts, axis=1)
    assert np.abs(radius - 1).max() < 0.1  # still the unit sphere
    assert trimesh.Trimesh(mesh.verts, mesh.faces, process=False).is_watertight
    assert mesh.verts.dtype == np.float32 and mesh.faces.dtype == np.int64


def test_colours_follow_their_vertices():
    mesh = decimate(coloured_sphere(), 2000)
    top, bottom = mesh.verts[:, 2] > 0.2, mesh.verts[:, 2] < -0.2
    assert mesh.vertex_channels["R"][top].min() > 0.99 and mesh.vertex_channels["B"][bottom].min() > 0.99
    assert set(mesh.vertex_channels) == {"R", "G", "B"}


def test_vertices_no_face_uses_are_dropped_and_the_colours_stay_with_theirs():
    sphere = coloured_sphere()
    stray = np.array([[5.0, 5.0, 5.0]], np.float32)  # marching cubes can leave such vertices
    channels = {k: np.concatenate([[0.5], v]).astype(np.float32) for k, v in sphere.vertex_channels.items()}
    mesh = decimate(TriMesh(np.concatenate([stray, sphere.verts]), sphere.faces + 1, vertex_channels=channels), 1000)
    assert len(mesh.faces) <= 1000 and len(mesh.verts) == len(np.unique(mesh.faces))
    assert np.abs(mesh.verts).max() < 1.1  # the stray vertex is gone
    top = mesh.verts[:, 2] > 0.2
    assert mesh.vertex_channels["R"][top].min() > 0.99


def test_many_small_pieces_decimate_to_a_tiny_budget():
    balls = [trimesh.creation.icosphere(subdivisions=1, radius=0.1).apply_translation([i, 0, 0]) for i in range(50)]
    pieces = trimesh.util.concatenate(balls)  # 4,000 faces in 50 pieces
    grey = np.full(len(pieces.vertices), 0.5, np.float32)
    mesh = decimate(TriMesh(pieces.vertices.astype(np.float32), pieces.faces,
                            vertex_channels={"R": grey, "G": grey, "B": grey}), 8)
    assert 0 < len(mesh.faces) <= 8 and len(mesh.verts) == len(np.unique(mesh.faces))
    np.testing.assert_allclose(mesh.vertex_channels["G"], 0.5)


def test_a_mesh_within_the_budget_is_returned_as_is():
    mesh = coloured_sphere()
    assert decimate(mesh, len(mesh.faces)) is mesh and decimate(mesh, None) is mesh


@pytest.mark.parametrize("bad", [0, 3, -5, 2.5, "1000", True])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="max_faces"):
        decimate(coloured_sphere(), bad)
