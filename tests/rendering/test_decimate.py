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


def test_a_mesh_within_the_budget_is_returned_as_is():
    mesh = coloured_sphere()
    assert decimate(mesh, len(mesh.faces)) is mesh and decimate(mesh, None) is mesh


@pytest.mark.parametrize("bad", [0, 3, -5, 2.5, "1000", True])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="max_faces"):
        decimate(coloured_sphere(), bad)
