"""Saving meshes to files (.ply, .obj, .glb; UV-textured .glb / .obj+.mtl), atomically, +Y or +Z up.

Shap-E's world is +Z up (docs/behaviour.md#conventions). glTF requires +Y up, so by default every format
is written +Y up: a rotation of -90 degrees about X, `(x, y, z) -> (x, z, -y)`. Pass `up_axis="z"` to keep
Shap-E coordinates (then .ply/.obj are byte-identical to the reference writers).
"""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
import trimesh
from PIL import Image

from shap_e.rendering.decimate import check_max_faces, decimate
from shap_e.rendering.mesh import FORMATS, UP_AXES, TriMesh, to_y_up
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.util.atomic import write_atomic
from shap_e.util.checks import check_finite

__all__ = [
    "FORMATS",
    "TexturedMesh",
    "bake_texture",
    "save_mesh",
    "save_textured_glb",
    "save_textured_obj",
    "to_y_up",
    "unwrap_and_bake",
    "write_atomic",
]


PathLike = Union[str, os.PathLike]
ColorFn = Callable[[torch.Tensor], torch.Tensor]


def save_mesh(
    mesh: Union[TorchMesh, TriMesh],
    path: PathLike,
    format: Optional[str] = None,
    up_axis: str = "y",
    allow_empty: bool = False,
    max_faces: Optional[int] = None,
) -> Path:
    """Write `mesh` to `path` atomically and return the path; see `TriMesh.save` for the options.

    max_faces: at most this many faces in the file (a mesh with more is decimated, vertex colours
    kept: `shap_e.rendering.decimate`); None keeps every face.
    """
    return _tri_mesh(mesh).save(path, format=format, up_axis=up_axis, allow_empty=allow_empty, max_faces=max_faces)


def _tri_mesh(mesh: Union[TorchMesh, TriMesh]) -> TriMesh:
    tri = mesh.tri_mesh() if isinstance(mesh, TorchMesh) else mesh
    if not isinstance(tri, TriMesh):
        raise ValueError(f"mesh must be a TorchMesh or TriMesh, got {type(mesh).__name__}")
    tri.check_finite("refusing to texture or write it")
    return tri


@dataclass
class TexturedMesh:
    """A UV-unwrapped mesh and its baked texture, ready to be written.

    verts `[V, 3]` float32 (already in the requested up axis), faces `[F, 3]` int64, uvs `[V, 2]` in
    [0, 1] (v up), texture `[size, size, 3]` uint8 sRGB (row 0 = top).
    """

    verts: np.ndarray
    faces: np.ndarray
    uvs: np.ndarray
    texture: np.ndarray


def save_textured_glb(
    mesh: Union[TorchMesh, TriMesh],
    path: PathLike,
    color_fn: ColorFn,
    texture_size: int = 1024,
    up_axis: str = "y",
    padding: int = 4,
    batch_size: int = 65536,
    max_faces: Optional[int] = None,
) -> Path:
    """Write a UV-textured GLB, atomically: xatlas unwrap, texture baked from `color_fn`.

    color_fn: maps surface points `[P, 3]` float32 (Shap-E coordinates, on the CPU) to linear RGB
        `[P, 3]` in [0, 1], e.g. the STF colour head. It is called in chunks of `batch_size` points.
    texture_size: side of the square texture in texels. padding: texels of colour dilated over
        chart borders (hides seams when the texture is filtered or mipmapped).
    max_faces: decimate a mesh with more faces to at most this many before unwrapping (the texture
        keeps the colour detail); None keeps every face.
    The texture is stored as an sRGB PNG (glTF's baseColorTexture is sRGB-encoded). Needs the
    optional `xatlas` package (`pip install shap-e[texture]`).
    """
    path = Path(path)
    if path.suffix.lower() != ".glb":
        raise ValueError(f"save_textured_glb writes .glb files, got {path.name!r}")
    textured = unwrap_and_bake(mesh, color_fn, texture_size, up_axis, padding, batch_size, max_faces)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=Image.fromarray(textured.texture), metallicFactor=0.0, roughnessFactor=1.0
    )
    write_atomic(path, _trimesh_with(textured, material).export(file_type="glb"))
    return path


def save_textured_obj(
    mesh: Union[TorchMesh, TriMesh],
    path: PathLike,
    color_fn: ColorFn,
    texture_size: int = 1024,
    up_axis: str = "y",
    padding: int = 4,
    batch_size: int = 65536,
    max_faces: Optional[int] = None,
) -> List[Path]:
    """Write a UV-textured OBJ with its `<stem>.mtl` and `<stem>.png` (sRGB) next to it.

    Arguments as in `save_textured_glb`. Each file is written atomically; the OBJ comes last, so it
    only appears once the files it references exist. Returns the three paths (obj, mtl, png).
    """
    path = Path(path)
    if path.suffix.lower() != ".obj":
        raise ValueError(f"save_textured_obj writes .obj files, got {path.name!r}")
    textured = unwrap_and_bake(mesh, color_fn, texture_size, up_axis, padding, batch_size, max_faces)
    # Kd = 1 and Ks = 0, because viewers multiply map_Kd by Kd.
    material = trimesh.visual.material.SimpleMaterial(
        name=path.stem, image=Image.fromarray(textured.texture),
        diffuse=[255] * 4, ambient=[255] * 4, specular=[0, 0, 0, 255],
    )
    text, files = trimesh.exchange.obj.export_obj(
        _trimesh_with(textured, material), include_normals=False, include_texture=True,
        return_texture=True, mtl_name=f"{path.stem}.mtl",
    )
    written = []
    for name in sorted(files, key=lambda n: n.endswith(".mtl")):  # texture, then material
        write_atomic(path.parent / name, files[name])
        written.append(path.parent / name)
    write_atomic(path, text.encode("utf-8"))
    return [path] + written[::-1]


def unwrap_and_bake(
    mesh: Union[TorchMesh, TriMesh],
    color_fn: ColorFn,
    texture_size: int,
    up_axis: str = "y",
    padding: int = 4,
    batch_size: int = 65536,
    max_faces: Optional[int] = None,
) -> TexturedMesh:
    """UV-unwrap `mesh` (first decimated to `max_faces`, if given) with xatlas (seams split vertices)
    and bake `color_fn` into a texture."""
    if up_axis not in UP_AXES:
        raise ValueError(f"up_axis must be one of {UP_AXES}, got {up_axis!r}")
    if isinstance(texture_size, bool) or not isinstance(texture_size, int) or texture_size < 8:
        raise ValueError(f"texture_size must be an int >= 8, got {texture_size!r}")
    check_max_faces(max_faces)
    tri = decimate(_tri_mesh(mesh), max_faces)
    if len(tri.faces) == 0:
        raise ValueError("mesh has no faces; there is nothing to texture")
    xatlas = _import_xatlas()
    atlas = xatlas.Atlas()
    atlas.add_mesh(tri.verts.astype(np.float32), tri.faces.astype(np.uint32))
    pack = xatlas.PackOptions()
    pack.resolution, pack.padding = texture_size, max(1, padding // 2)
    atlas.generate(pack_options=pack)
    vmapping, faces, uvs = atlas[0]
    verts, faces = tri.verts[vmapping].astype(np.float32), faces.astype(np.int64)
    texture = bake_texture(verts, faces, uvs, color_fn, texture_size, padding, batch_size)
    out = TriMesh(verts, faces)
    if up_axis == "y":
        out = to_y_up(out)
    return TexturedMesh(out.verts, out.faces, uvs, texture)


def bake_texture(
    verts: np.ndarray,
    faces: np.ndarray,
    uvs: np.ndarray,
    color_fn: ColorFn,
    texture_size: int,
    padding: int = 4,
    batch_size: int = 65536,
) -> np.ndarray:
    """Bake `color_fn` into an sRGB texture `[size, size, 3]` uint8 (row 0 = top, i.e. v = 1).

    verts `[V, 3]`, faces `[F, 3]`, uvs `[V, 2]` in [0, 1]. Each covered texel gets the colour of the
    surface point under its centre; uncovered texels stay black except `padding` texels around charts.
    """
    size = texture_size
    texel = torch.from_numpy(np.asarray(uvs, dtype=np.float32)) * size - 0.5
    texel[:, 1] = size - 1 - texel[:, 1]  # image rows grow downwards, v grows upwards
    faces_t = torch.from_numpy(np.asarray(faces, dtype=np.int64))
    pixel, face, bary = _rasterize_uv(texel, faces_t, size)
    corners = torch.from_numpy(np.asarray(verts, dtype=np.float32))[faces_t[face]]  # [P, 3, 3]
    points = (bary[:, :, None] * corners).sum(dim=1)
    colors = torch.cat([_call_color_fn(color_fn, chunk) for chunk in points.split(batch_size)])
    image = torch.zeros(size * size, 3)
    covered = torch.zeros(size * size, dtype=torch.bool)
    image[pixel], covered[pixel] = colors, True
    image, covered = _dilate(image.view(size, size, 3), covered.view(size, size), padding)
    srgb = torch.where(image <= 0.0031308, 12.92 * image, 1.055 * image.clamp(min=1e-12) ** (1 / 2.4) - 0.055)
    return (srgb.clamp(0, 1) * 255).round().to(torch.uint8).numpy()


def _rasterize_uv(texel: torch.Tensor, faces: torch.Tensor, size: int) -> Tuple[torch.Tensor, ...]:
    """Texels whose centres lie in a UV triangle: flat pixel index `[P]`, face `[P]`, barycentrics `[P, 3]`.

    texel: `[V, 2]` (x, y) texel coordinates with texel centres at integers. Texels shared by two
    triangles keep one of them (both give the same surface point on a shared edge).
    """
    tri = texel[faces]  # [F, 3, 2]
    lo = tri.amin(dim=1).ceil().clamp(0, size - 1).long()
    hi = tri.amax(dim=1).floor().clamp(0, size - 1).long()
    extent = (hi - lo + 1).clamp(min=0)
    counts = extent[:, 0] * extent[:, 1]
    face = torch.repeat_interleave(torch.arange(len(faces)), counts)
    offset = torch.arange(len(face)) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    x = lo[face, 0] + offset % extent[face, 0]
    y = lo[face, 1] + torch.div(offset, extent[face, 0], rounding_mode="floor")
    a, b, c = tri[face].unbind(dim=1)  # [P, 2] each
    p = torch.stack([x, y], dim=1).float()
    area = _cross(b - a, c - a)
    w_a, w_b, w_c = _cross(b - p, c - p) / area, _cross(c - p, a - p) / area, _cross(a - p, b - p) / area
    bary = torch.stack([w_a, w_b, w_c], dim=1)
    inside = (bary >= -1e-4).all(dim=1) & (area.abs() > 1e-12)
    return (y * size + x)[inside], face[inside], bary[inside].clamp(min=0)


def _cross(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]


def _call_color_fn(color_fn: ColorFn, points: torch.Tensor) -> torch.Tensor:
    colors = torch.as_tensor(color_fn(points)).detach().float().cpu()
    if colors.shape != points.shape:
        raise ValueError(f"color_fn must return [P, 3] colours for [P, 3] points, got {tuple(colors.shape)}")
    check_finite(colors, "the texture colours", "the texture was not written; check the latent and the model")
    return colors.clamp(0, 1)


def _dilate(image: torch.Tensor, covered: torch.Tensor, steps: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Grow coloured regions `steps` texels: each new texel is the mean of its covered 3x3 neighbours.

    image: `[size, size, 3]`, covered: `[size, size]` bool.
    """
    for _ in range(steps):
        weight = covered.float()
        # [4, size, size]: colour sums and the covered count over each 3x3 window (avg_pool2d x 9
        # is several times faster than conv2d on the CPU).
        stacked = torch.cat([(image * weight[..., None]).permute(2, 0, 1), weight[None]])
        sums = F.avg_pool2d(stacked[None], 3, stride=1, padding=1, count_include_pad=True)[0] * 9
        grow = (sums[3] > 0.5) & ~covered
        mean = sums[:3].permute(1, 2, 0) / sums[3].clamp(min=1)[..., None]
        image = torch.where(grow[..., None], mean, image)
        covered = covered | grow
    return image, covered


def _trimesh_with(textured: TexturedMesh, material) -> trimesh.Trimesh:
    visual = trimesh.visual.TextureVisuals(uv=textured.uvs, material=material)
    return trimesh.Trimesh(textured.verts, textured.faces, visual=visual, process=False)


def _import_xatlas():
    try:
        import xatlas
    except ImportError as error:
        raise ImportError(
            "textured export needs the optional 'xatlas' package: pip install xatlas "
            "(or pip install 'shap-e[texture]')"
        ) from error
    return xatlas
