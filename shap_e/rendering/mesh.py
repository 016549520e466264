"""Triangle meshes with per-vertex channels, and the reference's PLY/OBJ writers (docs/behaviour.md#mesh-files)."""
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Dict, Optional, TextIO, Union

import numpy as np
import torch

if TYPE_CHECKING:
    import trimesh

__all__ = ["TorchMesh", "TriMesh"]

_RGB = ("R", "G", "B")


@dataclass
class TorchMesh:
    """A mesh as torch tensors (what marching cubes and the STF renderer produce).

    verts: `[n_verts, 3]` float32 positions (Shap-E world space, +Z up).
    faces: `[n_faces, 3]` int64 vertex indices, counter-clockwise seen from outside.
    vertex_channels: optional `{name: [n_verts]}`; 'R', 'G', 'B' hold **linear** colours in [0, 1].
    face_channels: optional `{name: [n_faces]}`.
    """

    verts: torch.Tensor
    faces: torch.Tensor
    vertex_channels: Optional[Dict[str, torch.Tensor]] = None
    face_channels: Optional[Dict[str, torch.Tensor]] = None

    def tri_mesh(self) -> "TriMesh":
        """The same mesh as numpy arrays on the CPU."""

        def to_numpy(channels):
            if channels is None:
                return None
            return {k: v.detach().cpu().numpy() for k, v in channels.items()}

        return TriMesh(
            verts=self.verts.detach().cpu().numpy(),
            faces=self.faces.detach().cpu().numpy(),
            vertex_channels=to_numpy(self.vertex_channels),
            face_channels=to_numpy(self.face_channels),
        )

    def to(self, device: Union[str, torch.device]) -> "TorchMesh":
        """The same mesh with every tensor on `device`."""

        def move(channels):
            return None if channels is None else {k: v.to(device) for k, v in channels.items()}

        return TorchMesh(
            self.verts.to(device), self.faces.to(device), move(self.vertex_channels), move(self.face_channels)
        )


@dataclass
class TriMesh:
    """A mesh as numpy arrays; see `TorchMesh` for the fields. `normals` are optional `[n_verts, 3]`."""

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

    def save(self, path, **kwargs) -> None:
        """Save atomically, format from the extension (.ply, .obj, .glb); see `export.save_mesh`."""
        # Imported here because export.py builds on this module.
        from shap_e.rendering.export import save_mesh

        save_mesh(self, path, **kwargs)
