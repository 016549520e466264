"""The PLY writer (official path, and the one PLY encoder of the package): binary little-endian,
byte for byte what the reference writes for meshes and point clouds (docs/behaviour.md#mesh-files).

`TriMesh.write_ply` and `PointCloud.write_ply` both call `ply_bytes`.
"""
from typing import BinaryIO, Optional

import numpy as np

__all__ = ["ply_bytes", "write_ply"]


def ply_bytes(coords: np.ndarray, rgb: Optional[np.ndarray] = None, faces: Optional[np.ndarray] = None) -> bytes:
    """The PLY file of `coords [n, 3]`, optional colours `rgb [n, 3]` in [0, 1] and `faces [m, 3]`.

    Vertices are `<3f` (+ `<3B` colours `round(rgb * 255.499)`, round-half-even in rgb's dtype,
    clipped to 0..255), faces `<B3I` (count 3, unsigned indices although the header says `int`,
    as the reference). The face element is declared whenever `faces` is given, even if empty.
    """
    coords = np.asarray(coords)
    if coords.ndim != 2 or coords.shape[1] != 3:
        raise ValueError(f"coords must be [n, 3], got shape {coords.shape}")
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {len(coords)}"]
    header += [f"property float {axis}" for axis in "xyz"]
    fields = [(axis, "<f4") for axis in "xyz"]
    if rgb is not None:
        rgb = np.asarray(rgb)
        if rgb.shape != coords.shape:
            raise ValueError(f"rgb must be [n, 3] like coords {coords.shape}, got shape {rgb.shape}")
        header += [f"property uchar {name}" for name in ("red", "green", "blue")]
        fields += [(name, "u1") for name in ("red", "green", "blue")]
    if faces is not None:
        faces = np.asarray(faces)
        if faces.ndim != 2 or faces.shape[1] != 3:
            raise ValueError(f"faces must be [m, 3], got shape {faces.shape}")
        header += [f"element face {len(faces)}", "property list uchar int vertex_index"]
    header.append("end_header")

    vertices = np.empty(len(coords), dtype=np.dtype(fields))
    for axis, name in enumerate("xyz"):
        vertices[name] = coords[:, axis]
    if rgb is not None:
        # The reference's struct.pack rejects levels outside 0..255; clipping only affects such input.
        levels = np.clip(np.round(rgb * 255.499), 0, 255).astype(np.uint8)
        for axis, name in enumerate(("red", "green", "blue")):
            vertices[name] = levels[:, axis]
    body = vertices.tobytes()
    if faces is not None:
        records = np.empty(len(faces), dtype=np.dtype([("count", "u1"), ("index", "<u4", (3,))]))
        records["count"] = 3
        records["index"] = faces
        body += records.tobytes()
    return ("\n".join(header) + "\n").encode("ascii") + body


def write_ply(
    raw_f: BinaryIO,
    coords: np.ndarray,
    rgb: Optional[np.ndarray] = None,
    faces: Optional[np.ndarray] = None,
) -> None:
    """Write `ply_bytes(coords, rgb, faces)` to the binary stream `raw_f`."""
    raw_f.write(ply_bytes(coords, rgb, faces))
