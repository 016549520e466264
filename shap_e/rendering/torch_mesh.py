"""`TorchMesh`: a triangle mesh as torch tensors, what marching cubes and the STF renderer produce."""
from dataclasses import dataclass, field
from typing import Dict, Optional, Union

import torch

from shap_e.rendering.mesh import TriMesh

__all__ = ["TorchMesh", "face_areas"]


def face_areas(verts: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Areas `[F]` of the triangles `faces [F, 3]` (int64 indices) of the points `verts [V, 3]`."""
    tri = verts[faces]
    return torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1).norm(dim=-1) / 2


@dataclass
class TorchMesh:
    """A mesh as torch tensors (what marching cubes and the STF renderer produce).

    verts: `[n_verts, 3]` float32 positions (Shap-E world space, +Z up).
    faces: `[n_faces, 3]` int64 vertex indices, counter-clockwise seen from outside.
    vertex_channels: `{name: [n_verts]}` (may be None); 'R', 'G', 'B' hold **linear** colours in [0, 1].
    face_channels: `{name: [n_faces]}` (may be None).
    """

    verts: torch.Tensor
    faces: torch.Tensor
    vertex_channels: Optional[Dict[str, torch.Tensor]] = field(default_factory=dict)
    face_channels: Optional[Dict[str, torch.Tensor]] = field(default_factory=dict)

    def face_areas(self) -> torch.Tensor:
        """Triangle areas `[n_faces]`."""
        return face_areas(self.verts, self.faces)

    def face_colors(self) -> Optional[torch.Tensor]:
        """The face channels 'R', 'G', 'B' stacked to `[n_faces, 3]`, or None when any is missing."""
        channels = self.face_channels or {}
        if not all(k in channels for k in "RGB"):
            return None
        return torch.stack([channels[k] for k in "RGB"], dim=-1)

    def tri_mesh(self) -> "TriMesh":
        """The same mesh as numpy arrays on the CPU (no normals; None channels stay None)."""

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
