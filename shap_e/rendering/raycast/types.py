"""Data of the ray caster (official path): rays, their nearest collisions, and a torch triangle mesh."""
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np
import torch

from shap_e.rendering import mesh as numpy_mesh
from shap_e.rendering.rasterize import face_normals
from shap_e.rendering.raycast._utils import normalize

__all__ = ["RayCollisions", "Rays", "TriMesh"]


@dataclass
class Rays:
    """`origins [N, 3]` and `directions [N, 3]` (any length) of N rays."""

    origins: torch.Tensor
    directions: torch.Tensor

    def normalized_directions(self) -> torch.Tensor:
        """`[N, 3]` unit directions."""
        return normalize(self.directions)


@dataclass
class RayCollisions:
    """The nearest hit of each of N rays on a mesh.

    collides `[N]` bool; ray_dists `[N]` (in units of the ray direction's length, inf on a miss);
    tri_indices `[N]` int64; barycentric `[N, 3]` weights of the triangle's vertices; normals `[N, 3]`
    unit face normals. Rays that miss read triangle 0 in tri_indices, barycentric and normals.
    """

    collides: torch.Tensor
    ray_dists: torch.Tensor
    tri_indices: torch.Tensor
    barycentric: torch.Tensor
    normals: torch.Tensor

    @classmethod
    def collect(cls, it: Iterable["RayCollisions"]) -> "RayCollisions":
        """The collisions of several ray batches, concatenated in order."""
        parts = list(it)
        if not parts:
            raise ValueError("cannot collect an empty iterable of RayCollisions")
        return cls(*(torch.cat(fields) for fields in zip(*(_fields(p) for p in parts))))


def _fields(collisions: RayCollisions):
    c = collisions
    return c.collides, c.ray_dists, c.tri_indices, c.barycentric, c.normals


@dataclass
class TriMesh:
    """A triangle mesh for ray casting: `faces [F, 3]` int64, `vertices [V, 3]` float and optional
    `vertex_colors [V, C]`."""

    faces: torch.Tensor
    vertices: torch.Tensor
    vertex_colors: Optional[torch.Tensor] = None

    def normals(self) -> torch.Tensor:
        """`[F, 3]` unit face normals by the right-hand rule (zero for degenerate faces)."""
        return face_normals(self.vertices, self.faces)

    @classmethod
    def from_numpy(cls, x: numpy_mesh.TriMesh) -> "TriMesh":
        """The torch mesh of a `shap_e.rendering.mesh.TriMesh`, its R, G, B channels as vertex colours."""
        colors = None
        if x.has_vertex_colors():
            colors = torch.from_numpy(np.stack([x.vertex_channels[c] for c in "RGB"], axis=-1))
        return cls(faces=torch.from_numpy(x.faces), vertices=torch.from_numpy(x.verts), vertex_colors=colors)

    def to(self, *args, **kwargs) -> "TriMesh":
        """The mesh with every tensor moved/cast by `Tensor.to(*args, **kwargs)`."""
        return TriMesh(
            faces=self.faces.to(*args, **kwargs),
            vertices=self.vertices.to(*args, **kwargs),
            vertex_colors=None if self.vertex_colors is None else self.vertex_colors.to(*args, **kwargs),
        )
