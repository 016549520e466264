"""Load a 3D asset file into one normalised, coloured triangle mesh (the Blender-free encoder input).

Any format trimesh reads works (OBJ + MTL + textures, PLY, STL, OFF, GLB/glTF, ...). Scenes are
flattened with their node transforms, then the whole asset is normalised as Shap-E's Blender script
does (docs/behaviour.md#conventions): bounding-box centre at the origin, largest extent 1, then x2, so it
fills [-1, 1]^3 with +Z up.

Colours are kept per face corner in **linear** RGB (Blender shades in linear space and converts to
sRGB at the end; so do `point_cloud` and `multiview`). Each face takes its colour from the first
source that exists: a UV texture (times a glTF base-colour factor), vertex colours, face colours, a
material colour, else Blender's default base colour 0.8 (linear).
"""
import os
import warnings
from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

import numpy as np
import torch

__all__ = ["AssetMesh", "load_asset", "DEFAULT_LINEAR_COLOR"]

# Blender's Principled BSDF default base colour, used for surfaces without any colour.
DEFAULT_LINEAR_COLOR = 0.8
# Formats whose files are +Y up and which Blender's importers turn to +Z up on import.
_Y_UP_EXTENSIONS = (".obj", ".glb", ".gltf")
SUPPORTED_EXTENSIONS = (".obj", ".ply", ".stl", ".off", ".glb", ".gltf")
_UP_AXES = ("auto", "y", "z")


@dataclass
class AssetMesh:
    """A triangle mesh with a colour source per face, in the [-1, 1]^3 frame of the encoder.

    verts: `[V, 3]` float32 positions; faces: `[F, 3]` int64 vertex indices.
    corner_colors: `[F, 3, 3]` linear RGB in [0, 1] at each face corner (multiplies the texture).
    corner_uvs: `[F, 3, 2]` texture coordinates at each face corner (zeros where untextured).
    face_texture: `[F]` int64 index into `textures`, -1 for untextured faces.
    textures: list of `[H, W, 3]` float32 linear RGB images (row 0 = top, v = 1).
    """

    verts: torch.Tensor
    faces: torch.Tensor
    corner_colors: torch.Tensor
    corner_uvs: torch.Tensor
    face_texture: torch.Tensor
    textures: List[torch.Tensor]

    def colors_at(self, face_index: torch.Tensor, bary: torch.Tensor) -> torch.Tensor:
        """Linear RGB `[P, 3]` at surface points given by faces `[P]` and barycentrics `[P, 3]`."""
        weights = bary.to(self.corner_colors.dtype)[..., None]
        color = (self.corner_colors[face_index] * weights).sum(dim=1)
        texture_id = self.face_texture[face_index]
        for t, image in enumerate(self.textures):
            on = (texture_id == t).nonzero().squeeze(1)
            if len(on):
                uv = (self.corner_uvs[face_index[on]] * weights[on]).sum(dim=1)
                color[on] = color[on] * _sample_bilinear(image, uv)
        return color

    def to(self, device) -> "AssetMesh":
        """The same mesh with every tensor on `device`."""
        return replace(
            self,
            verts=self.verts.to(device),
            faces=self.faces.to(device),
            corner_colors=self.corner_colors.to(device),
            corner_uvs=self.corner_uvs.to(device),
            face_texture=self.face_texture.to(device),
            textures=[t.to(device) for t in self.textures],
        )


def load_asset(path: str, up_axis: str = "auto") -> AssetMesh:
    """Load a mesh or scene file, flatten it and normalise it to [-1, 1]^3 (+Z up).

    up_axis: "z" keeps coordinates; "y" rotates a +Y-up asset to +Z up ((x, y, z) -> (x, -z, y), the
        mapping of Blender's OBJ and glTF importers); "auto" (default) uses "y" for .obj/.glb/.gltf
        (as Blender would import them) and "z" for everything else (PLY, STL, OFF, ...).
    """
    import trimesh

    if up_axis not in _UP_AXES:
        raise ValueError(f"up_axis must be one of {_UP_AXES}, got {up_axis!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no asset file at {path!r}")
    extension = os.path.splitext(path)[1].lower()
    if extension not in SUPPORTED_EXTENSIONS:
        raise ValueError(f"unsupported asset format {extension!r} ({path}); use one of {SUPPORTED_EXTENSIONS}")
    if up_axis == "auto":
        up_axis = "y" if extension in _Y_UP_EXTENSIONS else "z"
    scene = trimesh.load(path, force="scene", process=False)
    parts = [_load_part(mesh, transform) for mesh, transform in _scene_meshes(scene)]
    if not parts:
        raise ValueError(f"{path!r} contains no triangles; pass a file with a triangle mesh")
    return _normalise(_drop_non_finite(_concatenate(parts), path), y_up=up_axis == "y")


def _drop_non_finite(mesh: AssetMesh, path: str) -> AssetMesh:
    """Faces touching NaN/inf vertices are dropped with a warning (they have no place in space)."""
    bad_vertex = ~torch.isfinite(mesh.verts).all(dim=1)
    if not bad_vertex.any():
        return mesh
    keep = ~bad_vertex[mesh.faces].any(dim=1)
    if not keep.any():
        raise ValueError(f"{path!r}: every face has a NaN or infinite vertex; nothing is left to encode")
    warnings.warn(f"{path}: dropped {int((~keep).sum())} face(s) with NaN or infinite vertices")
    return replace(
        mesh, faces=mesh.faces[keep], corner_colors=mesh.corner_colors[keep], corner_uvs=mesh.corner_uvs[keep],
        face_texture=mesh.face_texture[keep], verts=torch.nan_to_num(mesh.verts),
    )


def _scene_meshes(scene) -> List[Tuple[object, np.ndarray]]:
    """(Trimesh, world transform) for every mesh instance with faces in the scene graph."""
    import trimesh

    found = []
    for node in scene.graph.nodes_geometry:
        transform, name = scene.graph[node]
        mesh = scene.geometry[name]
        if isinstance(mesh, trimesh.Trimesh) and len(mesh.faces):
            found.append((mesh, np.asarray(transform, dtype=np.float64)))
    return found


@dataclass
class _Part:
    verts: np.ndarray  # [V, 3] float64, world space
    faces: np.ndarray  # [F, 3] int64
    corner_colors: np.ndarray  # [F, 3, 3] linear
    corner_uvs: np.ndarray  # [F, 3, 2]
    texture: Optional[np.ndarray]  # [H, W, 3] linear, or None


def _load_part(mesh, transform: np.ndarray) -> _Part:
    verts = np.asarray(mesh.vertices, dtype=np.float64)
    verts = verts @ transform[:3, :3].T + transform[:3, 3]
    faces = np.asarray(mesh.faces, dtype=np.int64)
    colors, uvs, texture = _part_colors(mesh.visual, faces, len(verts))
    return _Part(verts, faces, colors, uvs, texture)


def _part_colors(visual, faces: np.ndarray, n_verts: int):
    """Corner colours `[F, 3, 3]` (linear), corner UVs `[F, 3, 2]` and an optional linear texture."""
    n_faces = len(faces)
    uvs = np.zeros((n_faces, 3, 2))
    kind = getattr(visual, "kind", None)
    if kind == "texture":
        material = visual.material
        image = getattr(material, "baseColorTexture", None) or getattr(material, "image", None)
        uv = getattr(visual, "uv", None)
        factor = getattr(material, "baseColorFactor", None)
        if image is not None and uv is not None and len(uv) == n_verts:
            base = _rgb01(factor) if factor is not None else np.ones(3)
            texture = _srgb_np_to_linear(np.asarray(image.convert("RGB"), dtype=np.float64) / 255)
            return np.broadcast_to(_srgb_np_to_linear(base), (n_faces, 3, 3)), np.asarray(uv)[faces], texture
        if image is None and uv is not None:
            warnings.warn("a texture of the asset could not be loaded; using its material colour instead")
        return np.broadcast_to(_srgb_np_to_linear(_rgb01(material.main_color)), (n_faces, 3, 3)), uvs, None
    if kind == "vertex":
        colors = _srgb_np_to_linear(_rgb01(visual.vertex_colors))
        return colors[faces], uvs, None
    if kind == "face":
        colors = _srgb_np_to_linear(_rgb01(visual.face_colors))
        return np.repeat(colors[:, None], 3, axis=1), uvs, None
    return np.full((n_faces, 3, 3), DEFAULT_LINEAR_COLOR), uvs, None


def _rgb01(color) -> np.ndarray:
    """RGB(A) colours as uint8 or floats -> float RGB in [0, 1] (alpha dropped)."""
    array = np.asarray(color)
    rgb = array[..., :3].astype(np.float64)
    if array.dtype == np.uint8 or rgb.max(initial=0) > 1:
        rgb = rgb / 255
    return rgb.clip(0, 1)


def _srgb_np_to_linear(u: np.ndarray) -> np.ndarray:
    return np.where(u <= 0.04045, u / 12.92, ((u + 0.055) / 1.055) ** 2.4)


def _concatenate(parts: List[_Part]) -> AssetMesh:
    offsets = np.cumsum([0] + [len(p.verts) for p in parts[:-1]])
    textures, face_texture = [], []
    for part in parts:
        face_texture.append(np.full(len(part.faces), len(textures) if part.texture is not None else -1))
        if part.texture is not None:
            textures.append(torch.tensor(part.texture, dtype=torch.float32))
    return AssetMesh(
        verts=torch.tensor(np.concatenate([p.verts for p in parts]), dtype=torch.float64),
        faces=torch.tensor(np.concatenate([p.faces + o for p, o in zip(parts, offsets)]), dtype=torch.int64),
        corner_colors=torch.tensor(np.concatenate([p.corner_colors for p in parts]), dtype=torch.float32),
        corner_uvs=torch.tensor(np.concatenate([p.corner_uvs for p in parts]), dtype=torch.float32),
        face_texture=torch.tensor(np.concatenate(face_texture), dtype=torch.int64),
        textures=textures,
    )


def _normalise(mesh: AssetMesh, y_up: bool) -> AssetMesh:
    """Rotate to +Z up, centre the bounding box, scale the largest extent to 2 (docs/behaviour.md#conventions)."""
    verts = mesh.verts
    if y_up:
        verts = torch.stack([verts[:, 0], -verts[:, 2], verts[:, 1]], dim=1)
    used = verts[mesh.faces.unique()]  # unreferenced vertices must not move the bounding box
    lo, hi = used.amin(dim=0), used.amax(dim=0)
    extent = float((hi - lo).max())
    if not extent > 0:
        raise ValueError("the asset has zero size (all vertices coincide); pass a non-degenerate mesh")
    verts = (verts - (lo + hi) / 2) * (2 / extent)
    return replace(mesh, verts=verts.float())


def _sample_bilinear(image: torch.Tensor, uv: torch.Tensor) -> torch.Tensor:
    """Bilinear texture lookup with repeat wrapping: `image [H, W, 3]`, `uv [P, 2]` -> `[P, 3]`."""
    height, width = image.shape[:2]
    x = uv[:, 0] * width - 0.5
    y = (1 - uv[:, 1]) * height - 0.5  # v = 1 is the top row of the image
    x0, y0 = x.floor(), y.floor()
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.long(), y0.long()

    def texel(ix, iy):
        return image[iy.remainder(height), ix.remainder(width)]

    top = texel(x0, y0) * (1 - fx) + texel(x0 + 1, y0) * fx
    bottom = texel(x0, y0 + 1) * (1 - fx) + texel(x0 + 1, y0 + 1) * fx
    return top * (1 - fy) + bottom * fy
