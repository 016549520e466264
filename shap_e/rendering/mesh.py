"""`TriMesh`: a triangle mesh as numpy arrays, and its file formats (PLY and OBJ as the reference
writes them, byte for byte; GLB), written atomically, +Y or +Z up (SPEC §5.7).

Shap-E's world is +Z up (SPEC §7). glTF requires +Y up, so `save` writes every format +Y up by
default: a rotation of -90 degrees about X, `(x, y, z) -> (x, z, -y)`.
"""
import io
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Dict, Optional, TextIO, Union

import numpy as np

from shap_e.util.atomic import write_atomic
from shap_e.util.errors import NonFiniteError

if TYPE_CHECKING:
    import trimesh

__all__ = ["FORMATS", "TriMesh", "UP_AXES", "to_y_up"]

FORMATS = ("ply", "obj", "glb")
UP_AXES = ("y", "z")
PathLike = Union[str, os.PathLike]

_RGB = ("R", "G", "B")


@dataclass
class TriMesh:
    """A mesh as numpy arrays; the fields are those of
    `shap_e.rendering.torch_mesh.TorchMesh`. `normals` are optional `[n_verts, 3]`."""

    verts: np.ndarray
    faces: np.ndarray
    vertex_channels: Optional[Dict[str, np.ndarray]] = None
    face_channels: Optional[Dict[str, np.ndarray]] = None
    normals: Optional[np.ndarray] = None

    def __post_init__(self) -> None:
        self.verts = np.asarray(self.verts)
        self.faces = np.asarray(self.faces)
        if self.verts.ndim != 2 or self.verts.shape[1] != 3:
            raise ValueError(f"verts must be [n_verts, 3], got {self.verts.shape}")
        if self.faces.ndim != 2 or self.faces.shape[1] != 3:
            raise ValueError(f"faces must be [n_faces, 3], got {self.faces.shape}")
        if self.faces.size and (self.faces.min() < 0 or self.faces.max() >= len(self.verts)):
            raise ValueError(f"faces index outside [0, {len(self.verts)}); check the vertex numbering")

    def has_vertex_colors(self) -> bool:
        """True when all of the 'R', 'G', 'B' vertex channels are present."""
        return self.vertex_channels is not None and all(k in self.vertex_channels for k in _RGB)

    def vertex_colors(self) -> np.ndarray:
        """Linear vertex colours `[n_verts, 3]` float32 in [0, 1] (requires R, G, B channels)."""
        if not self.has_vertex_colors():
            raise ValueError("the mesh has no 'R', 'G', 'B' vertex channels")
        return np.stack([np.asarray(self.vertex_channels[k], dtype=np.float32) for k in _RGB], axis=1)

    def ply_bytes(self) -> bytes:
        """The binary little-endian PLY file of the reference writer, byte for byte."""
        header = [
            "ply",
            "format binary_little_endian 1.0",
            f"element vertex {len(self.verts)}",
            "property float x",
            "property float y",
            "property float z",
        ]
        fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
        if self.has_vertex_colors():
            header += ["property uchar red", "property uchar green", "property uchar blue"]
            fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        if len(self.faces):
            # The reference declares signed ints but writes unsigned ones; identical for valid meshes.
            header += [f"element face {len(self.faces)}", "property list uchar int vertex_index"]
        header.append("end_header")

        vertices = np.empty(len(self.verts), dtype=np.dtype(fields))
        for axis, name in enumerate("xyz"):
            vertices[name] = self.verts[:, axis]
        if self.has_vertex_colors():
            # float32 product then round-half-even, as the reference; clipping only affects invalid input.
            levels = np.clip(np.round(self.vertex_colors() * np.float32(255.499)), 0, 255).astype(np.uint8)
            for axis, name in enumerate(("red", "green", "blue")):
                vertices[name] = levels[:, axis]
        faces = np.empty(len(self.faces), dtype=np.dtype([("count", "u1"), ("index", "<u4", (3,))]))
        faces["count"] = 3
        faces["index"] = self.faces
        return ("\n".join(header) + "\n").encode("ascii") + vertices.tobytes() + faces.tobytes()

    def obj_text(self) -> str:
        """The reference's OBJ text: `v x y z [r g b]` then 1-based `f i j k`, no trailing newline."""
        columns = [self.verts.astype(np.float32)]
        if self.has_vertex_colors():
            columns.append(self.vertex_colors())
        # tolist() widens float32 to Python floats, whose str() is what the reference prints.
        rows = np.concatenate(columns, axis=1).tolist()
        lines = ["v " + " ".join(str(value) for value in row) for row in rows]
        lines += [f"f {a} {b} {c}" for a, b, c in (self.faces.astype(np.int64) + 1).tolist()]
        return "\n".join(lines)

    def write_ply(self, f: BinaryIO) -> None:
        """Write `ply_bytes()` to a binary stream."""
        f.write(self.ply_bytes())

    def write_obj(self, f: Union[TextIO, BinaryIO]) -> None:
        """Write `obj_text()` to a text stream (or UTF-8 encoded to a binary stream)."""
        text = self.obj_text()
        f.write(text if isinstance(f, io.TextIOBase) else text.encode("utf-8"))

    def check_finite(self, consequence: str) -> None:
        """Raise NonFiniteError (ending in `consequence`) when a vertex position, normal or channel
        holds NaN or infinity: such a file would be invalid (glTF forbids it) or garbage."""
        arrays = {"vertex positions": self.verts, "normals": self.normals,
                  **{f"vertex channel {k}": v for k, v in (self.vertex_channels or {}).items()},
                  **{f"face channel {k}": v for k, v in (self.face_channels or {}).items()}}
        for name, values in arrays.items():
            if values is not None and not np.isfinite(np.asarray(values, dtype=np.float64)).all():
                raise NonFiniteError(f"the mesh's {name} hold NaN or infinite values; {consequence}", stage="mesh")

    def to_trimesh(self) -> "trimesh.Trimesh":
        """A `trimesh.Trimesh` (unprocessed: same vertex order) with uint8 linear vertex colours if present."""
        # Imported here: trimesh takes ~0.7 s to import and only export paths need it.
        import trimesh

        colors = None
        if self.has_vertex_colors():
            colors = np.clip(np.round(self.vertex_colors() * 255), 0, 255).astype(np.uint8)
        return trimesh.Trimesh(
            vertices=self.verts.astype(np.float64), faces=self.faces, vertex_colors=colors, process=False
        )

    def save(self, path: PathLike, format: Optional[str] = None, up_axis: str = "y",
             allow_empty: bool = False) -> Path:
        """Write the mesh to `path` atomically (a failure leaves no file behind) and return the path.

        format: 'ply' (binary, uint8 vertex colours), 'obj' (`v x y z r g b` vertex colours) or 'glb'
            (vertex colours as glTF COLOR_0). Default: the file extension.
        up_axis: 'y' rotates Shap-E's +Z up to +Y up (what glTF and most viewers expect); 'z' keeps
            Shap-E coordinates (then .ply/.obj are byte-identical to `write_ply`/`write_obj`).
        allow_empty: a mesh without faces raises ValueError unless this is True; then a valid file
            without geometry is written.
        Colours stay **linear** in every format: glTF defines COLOR_0 as linear, and PLY/OBJ store what
        the reference stores (`round(255.499 c)` / floats).
        """
        path = Path(path)
        format = _resolve_format(path, format)
        if up_axis not in UP_AXES:
            raise ValueError(f"up_axis must be one of {UP_AXES}, got {up_axis!r}")
        if len(self.faces) == 0 and not allow_empty:
            raise ValueError(f"mesh has no faces; refusing to write {path} (pass allow_empty=True to write it anyway)")
        self.check_finite(f"refusing to write {path}")
        mesh = to_y_up(self) if up_axis == "y" else self
        write_atomic(path, _encode(mesh, format))
        return path


def to_y_up(mesh: TriMesh) -> TriMesh:
    """The mesh rotated -90 degrees about X, so that Shap-E's +Z up becomes +Y up: `(x, y, z) -> (x, z, -y)`."""
    verts = np.asarray(mesh.verts)
    rotated = np.stack([verts[:, 0], verts[:, 2], -verts[:, 1]], axis=1).astype(verts.dtype)
    normals = None
    if mesh.normals is not None:
        normals = np.stack([mesh.normals[:, 0], mesh.normals[:, 2], -mesh.normals[:, 1]], axis=1)
    return TriMesh(rotated, mesh.faces, mesh.vertex_channels, mesh.face_channels, normals)


def _resolve_format(path: Path, format: Optional[str]) -> str:
    name = (format or path.suffix.lstrip(".")).lower()
    if name not in FORMATS:
        source = f"format {format!r}" if format else f"extension of {path.name!r}"
        raise ValueError(f"unknown mesh format ({source}); use one of {', '.join(FORMATS)}")
    return name


def _encode(mesh: TriMesh, format: str) -> bytes:
    if format == "ply":
        return mesh.ply_bytes()
    if format == "obj":
        return mesh.obj_text().encode("utf-8")
    if len(mesh.faces) == 0:
        return _empty_glb()
    return mesh.to_trimesh().export(file_type="glb")


def _empty_glb() -> bytes:
    """A valid GLB holding one empty scene (trimesh refuses to export empty scenes)."""
    document = {"asset": {"version": "2.0", "generator": "shap_e"}, "scenes": [{}], "scene": 0}
    text = json.dumps(document, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 4)  # chunks are 4-byte aligned, JSON padded with spaces
    chunk = struct.pack("<II", len(text), 0x4E4F534A) + text
    return struct.pack("<4sII", b"glTF", 2, 12 + len(chunk)) + chunk
