"""Lighter meshes: quadric edge-collapse decimation to a face budget, keeping vertex colours.

Marching cubes at grid 128 gives tens of thousands of faces for shapes a few thousand describe.
`decimate` collapses edges with the quadric error metric (Garland & Heckbert 1997, through the
`fast-simplification` package) until at most `max_faces` remain; each kept vertex takes the mean of
the vertex channels (colours) of the vertices collapsed into it.
"""
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import numpy as np

if TYPE_CHECKING:  # `shap_e.rendering.mesh` imports this module: its writers take `max_faces`
    from shap_e.rendering.mesh import TriMesh

__all__ = ["check_max_faces", "decimate"]

_ATTEMPTS = 4


def check_max_faces(max_faces: Optional[int], name: str = "max_faces") -> None:
    """None (keep every face) or an int >= 4; a ValueError names `name` otherwise."""
    if max_faces is None:
        return
    if isinstance(max_faces, bool) or not isinstance(max_faces, (int, np.integer)) or max_faces < 4:
        raise ValueError(f"{name} must be an integer of at least 4 (or None to keep every face), got {max_faces!r}")


def decimate(mesh: "TriMesh", max_faces: Optional[int]) -> "TriMesh":
    """`mesh` with at most `max_faces` faces (the mesh itself when it has no more, or when None).

    Vertex channels are averaged over the vertices collapsed into each kept vertex; face channels
    and normals are dropped (they no longer match the faces).
    """
    check_max_faces(max_faces)
    if max_faces is None or len(mesh.faces) <= max_faces:
        return mesh
    simplify = _import_simplification()
    verts, faces, channels = _referenced(np.asarray(mesh.verts, dtype=np.float64),
                                         np.asarray(mesh.faces, dtype=np.int64), mesh.vertex_channels)
    budget = max_faces
    for _ in range(_ATTEMPTS):
        _, _, collapses = simplify.simplify(verts, faces, target_reduction=1.0 - budget / len(faces),
                                            return_collapses=True)
        # Replaying the collapses gives the same mesh and where each input vertex went.
        new_verts, new_faces, mapping = simplify.replay_simplification(verts, faces, collapses)
        if len(new_faces) <= max_faces:
            break
        # The collapses overshoot the target by a few faces: ask for proportionally fewer.
        budget = max(1, int(budget * max_faces / len(new_faces)) - 1)
    else:
        raise ValueError(f"decimation keeps {len(new_faces)} faces at best, more than max_faces={max_faces}; "
                         "pass a larger max_faces")
    new_verts, new_faces, new_channels = _referenced(
        new_verts, np.asarray(new_faces, dtype=np.int64), _averaged(channels, np.asarray(mapping), len(new_verts)))
    return type(mesh)(verts=new_verts.astype(np.float32), faces=new_faces, vertex_channels=new_channels)


def _referenced(verts: np.ndarray, faces: np.ndarray, channels: Optional[Dict[str, np.ndarray]]) -> Tuple[
        np.ndarray, np.ndarray, Optional[Dict[str, np.ndarray]]]:
    """The vertices `[V, 3]` that some face uses, the faces `[F, 3]` renumbered, and their channels."""
    used = np.unique(faces)
    if len(used) == len(verts):
        return verts, faces, channels
    renumber = np.zeros(len(verts), dtype=np.int64)
    renumber[used] = np.arange(len(used))
    kept = None if channels is None else {name: np.asarray(values)[used] for name, values in channels.items()}
    return verts[used], renumber[faces], kept


def _averaged(channels: Optional[Dict[str, np.ndarray]], mapping: np.ndarray, n: int) -> Optional[Dict[str, np.ndarray]]:
    """Each of the `n` kept vertices' mean of the channels of the input vertices `mapping` sends to it
    (`mapping[i] = -1`: input vertex i went with a component that collapsed away)."""
    if not channels:
        return None
    kept = mapping >= 0
    counts = np.bincount(mapping[kept], minlength=n).astype(np.float64)
    counts[counts == 0] = 1
    return {
        name: (np.bincount(mapping[kept], weights=np.asarray(values, dtype=np.float64)[kept], minlength=n)
               / counts).astype(np.asarray(values).dtype)
        for name, values in channels.items()
    }


def _import_simplification():
    try:
        import fast_simplification
    except ImportError as e:
        raise ImportError("max_faces needs fast-simplification: pip install fast-simplification") from e
    return fast_simplification
