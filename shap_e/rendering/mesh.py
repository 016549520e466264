"""`TriMesh`: a triangle mesh as numpy arrays, and its file formats: PLY and OBJ as the reference
writes them, byte for byte; GLB; and the official `.npz` of the arrays (`save`/`load`), docs/behaviour.md#mesh-files.

Shap-E's world is +Z up (docs/behaviour.md#conventions). glTF requires +Y up, so `save` writes PLY/OBJ/GLB +Y up by
default: a rotation of -90 degrees about X, `(x, y, z) -> (x, z, -y)`. The `.npz` keeps the arrays
as they are.
"""
import io
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, Dict, Optional, TextIO, Union

import numpy as np

from shap_e.rendering.decimate import check_max_faces, decimate
from shap_e.rendering.ply_util import ply_bytes
from shap_e.util.atomic import write_atomic
from shap_e.util.errors import NonFiniteError

if TYPE_CHECKING:
    import trimesh

__all__ = ["FORMATS", "TriMesh", "UP_AXES", "to_y_up"]

FORMATS = ("ply", "obj", "glb")
ARRAY_FORMAT = "npz"
UP_AXES = ("y", "z")
PathLike = Union[str, os.PathLike]

_RGB = ("R", "G", "B")


@dataclass
class TriMesh:
    """A mesh as numpy arrays (the official field order).

    verts: `[n_verts, 3]` positions; faces: `[n_faces, 3]` vertex indices; normals: optional
    `[n_faces, 3]`; vertex_channels / face_channels: `{name: [n_verts]}` / `{name: [n_faces]}`,
    'R', 'G', 'B' vertex channels hold linear colours in [0, 1].
    """

    verts: np.ndarray
    faces: np.ndarray
    normals: Optional[np.ndarray] = None
    vertex_channels: Optional[Dict[str, np.ndarray]] = field(default_factory=dict)
    face_channels: Optional[Dict[str, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verts = np.asarray(self.verts)
        self.faces = np.asarray(self.faces)
        if self.verts.ndim != 2 or self.verts.shape[1] != 3:
            raise ValueError(f"verts must be [n_verts, 3], got {self.verts.shape}")
        if self.faces.ndim != 2 or self.faces.shape[1] != 3:
            raise ValueError(f"faces must be [n_faces, 3], got {self.faces.shape}")
        if self.faces.size and (self.faces.min() < 0 or self.faces.max() >= len(self.verts)):
            raise ValueError(f"faces index outside [0, {len(self.verts)}); check the vertex numbering")

    @classmethod
    def load(cls, f: Union[PathLike, BinaryIO]) -> "TriMesh":
        """A mesh from the official `.npz` (a path or a binary file object): `verts`, `faces`,
        optional `normals`, `v_<name>` vertex and `f_<name>` face channels."""
        with np.load(f) as arrays:
            channels = {prefix: {k[2:]: arrays[k] for k in arrays.files if k.startswith(prefix + "_")}
                        for prefix in ("v", "f")}
            return cls(
                verts=arrays["verts"],
                faces=arrays["faces"],
                normals=arrays["normals"] if "normals" in arrays.files else None,
                vertex_channels=channels["v"],
                face_channels=channels["f"],
            )

    def npz_bytes(self) -> bytes:
        """The official `.npz` of the arrays (what `load` reads)."""
        arrays = dict(verts=self.verts, faces=self.faces)
        if self.normals is not None:
            arrays["normals"] = self.normals
        arrays.update({f"v_{k}": v for k, v in (self.vertex_channels or {}).items()})
        arrays.update({f"f_{k}": v for k, v in (self.face_channels or {}).items()})
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    def has_vertex_colors(self) -> bool:
        """True when all of the 'R', 'G', 'B' vertex channels are present."""
        return self.vertex_channels is not None and all(k in self.vertex_channels for k in _RGB)

    def vertex_colors(self) -> np.ndarray:
        """Linear vertex colours `[n_verts, 3]` float32 in [0, 1] (requires R, G, B channels)."""
        return self._rgb().astype(np.float32)

    def _rgb(self) -> np.ndarray:
        """The R, G, B vertex channels stacked `[n_verts, 3]` in their own dtype, as the reference writers."""
        if not self.has_vertex_colors():
            raise ValueError("the mesh has no 'R', 'G', 'B' vertex channels")
        return np.stack([np.asarray(self.vertex_channels[k]) for k in _RGB], axis=1)

    def ply_bytes(self) -> bytes:
        """The binary little-endian PLY file of the reference writer, byte for byte (`ply_util`)."""
        return ply_bytes(self.verts, self._rgb() if self.has_vertex_colors() else None, self.faces)

    def obj_text(self) -> str:
        """The reference's OBJ text: `v x y z [r g b]` then 1-based `f i j k`, no trailing newline.

        Numbers are `str()` of the stored values (float32 widened to Python floats, as the reference).
        """
        rows = self.verts.tolist()
        if self.has_vertex_colors():
            rows = [coord + color for coord, color in zip(rows, self._rgb().tolist())]
        lines = ["v " + " ".join(str(value) for value in row) for row in rows]
        lines += [f"f {a} {b} {c}" for a, b, c in (self.faces.astype(np.int64) + 1).tolist()]
        return "\n".join(lines)

    def write_ply(self, raw_f: BinaryIO, max_faces: Optional[int] = None) -> None:
        """Write `ply_bytes()` to a binary stream; `max_faces`: at most that many faces (see `save`)."""
        raw_f.write(decimate(self, max_faces).ply_bytes())

    def write_obj(self, raw_f: Union[TextIO, BinaryIO], max_faces: Optional[int] = None) -> None:
        """Write `obj_text()` to a text stream (or UTF-8 encoded to a binary stream); `max_faces`:
        at most that many faces (see `save`)."""
        text = decimate(self, max_faces).obj_text()
        raw_f.write(text if isinstance(raw_f, io.TextIOBase) else text.encode("utf-8"))

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

    def save(self, f: Union[PathLike, IO[bytes]], format: Optional[str] = None, up_axis: str = "y",
             allow_empty: bool = False, max_faces: Optional[int] = None) -> Optional[Path]:
        """Write the mesh to a path (atomically: a failure leaves no file behind) or a binary stream.

        f: a path, whose extension picks the format ('.npz', '.ply', '.obj', '.glb'), or a binary
            file object, which gets the official `.npz` (`TriMesh.load` reads it back).
        format: 'npz', 'ply' (binary, uint8 vertex colours), 'obj' (`v x y z r g b` vertex colours)
            or 'glb' (vertex colours as glTF COLOR_0); overrides the extension / the stream default.
        up_axis: for PLY/OBJ/GLB, 'y' rotates Shap-E's +Z up to +Y up (what glTF and most viewers
            expect); 'z' keeps Shap-E coordinates (then .ply/.obj are byte-identical to
            `write_ply`/`write_obj`). The `.npz` always holds the arrays as they are.
        allow_empty: a PLY/OBJ/GLB of a mesh without faces raises ValueError unless this is True;
            then a valid file without geometry is written.
        max_faces: at most this many faces in the file, in every format: a mesh with more is
            decimated (quadric edge collapse, `shap_e.rendering.decimate`; vertex colours are
            averaged over the merged vertices, normals and face channels dropped). None keeps every face.
        Colours stay **linear** in every format: glTF defines COLOR_0 as linear, and PLY/OBJ store what
        the reference stores (`round(255.499 c)` / floats). Returns the path (None for a stream).
        """
        check_max_faces(max_faces)
        stream = hasattr(f, "write")
        format = _resolve_format(None if stream else Path(f), format)
        name = getattr(f, "name", "the stream") if stream else Path(f)
        self.check_finite(f"refusing to write {name}")
        mesh = decimate(self, max_faces)
        if format == ARRAY_FORMAT:
            data = mesh.npz_bytes()
        else:
            if up_axis not in UP_AXES:
                raise ValueError(f"up_axis must be one of {UP_AXES}, got {up_axis!r}")
            if len(mesh.faces) == 0 and not allow_empty:
                raise ValueError(
                    f"mesh has no faces; refusing to write {name} (pass allow_empty=True to write it anyway)"
                )
            data = _encode(to_y_up(mesh) if up_axis == "y" else mesh, format)
        if stream:
            f.write(data)
            return None
        write_atomic(name, data)
        return name


def to_y_up(mesh: TriMesh) -> TriMesh:
    """The mesh rotated -90 degrees about X, so that Shap-E's +Z up becomes +Y up: `(x, y, z) -> (x, z, -y)`."""
    verts = np.asarray(mesh.verts)
    rotated = np.stack([verts[:, 0], verts[:, 2], -verts[:, 1]], axis=1).astype(verts.dtype)
    normals = None
    if mesh.normals is not None:
        normals = np.stack([mesh.normals[:, 0], mesh.normals[:, 2], -mesh.normals[:, 1]], axis=1)
    return TriMesh(rotated, mesh.faces, normals, mesh.vertex_channels, mesh.face_channels)


def _resolve_format(path: Optional[Path], format: Optional[str]) -> str:
    """The format named by `format`, else by `path`'s extension; a stream (`path` None) defaults to npz."""
    if format is None and path is None:
        return ARRAY_FORMAT
    name = (format or path.suffix.lstrip(".")).lower()
    if name not in FORMATS + (ARRAY_FORMAT,):
        source = f"format {format!r}" if format else f"extension of {path.name!r}"
        raise ValueError(f"unknown mesh format ({source}); use one of {', '.join(FORMATS + (ARRAY_FORMAT,))}")
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
