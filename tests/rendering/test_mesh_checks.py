"""A mesh with NaN or infinite values is never written: such a GLB is invalid, such a PLY garbage."""
import numpy as np
import pytest

from shap_e.rendering.mesh import TriMesh
from shap_e.util.errors import NonFiniteError


def _mesh(**changes):
    verts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float32)
    channels = {k: np.full(3, 0.5, dtype=np.float32) for k in "RGB"}
    mesh = TriMesh(verts, np.array([[0, 1, 2]]), vertex_channels=channels)
    for name, value in changes.items():
        setattr(mesh, name, value)
    return mesh


@pytest.mark.parametrize("fmt", ["glb", "ply", "obj"])
def test_non_finite_positions_or_colours_are_refused_and_nothing_is_written(tmp_path, fmt):
    nan_verts = _mesh().verts.copy()
    nan_verts[1, 2] = np.nan
    bad_colour = {"R": np.array([0.5, np.inf, 0.5]), "G": np.zeros(3), "B": np.zeros(3)}
    for mesh, what in ((_mesh(verts=nan_verts), "vertex positions"), (_mesh(vertex_channels=bad_colour),
                                                                      "vertex channel R")):
        with pytest.raises(NonFiniteError, match=f"the mesh's {what} hold NaN or infinite values; refusing to write"):
            mesh.save(tmp_path / f"mesh.{fmt}")
    assert list(tmp_path.iterdir()) == []
    _mesh().save(tmp_path / f"mesh.{fmt}")
    assert (tmp_path / f"mesh.{fmt}").stat().st_size > 0
