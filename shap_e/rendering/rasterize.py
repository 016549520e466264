"""A pure-torch z-buffer rasteriser for triangle meshes seen by `ProjectiveCamera`s.

Pixels use the camera model of docs/behaviour.md#cameras: pixel `(col, row)` is the ray
`z + x * u * tan(x_fov / 2) + y * v * tan(y_fov / 2)` with `u = col / (W - 1) * 2 - 1` and
`v = row / (H - 1) * 2 - 1`, so rasterising a pixel is the same as casting that ray (nearest hit).
Both faces of every triangle are drawn (no back-face culling), like a ray caster.

Per view: project the vertices, list the pixels of every triangle's bounding box, keep those inside
the triangle (edge functions), and keep the nearest per pixel with one `scatter_reduce("amin")` on
`depth bits << 32 | face index` (positive float32 bits sort like the floats, and ties go to the
lower face index, so the result is deterministic). Triangles are processed in chunks of at most
`max_candidates` bounding-box pixels to bound memory.
"""
import math
from dataclasses import dataclass
from typing import Sequence, Tuple, Union

import torch

from shap_e.rendering.cameras import ProjectiveCamera

__all__ = [
    "Fragments",
    "rasterize",
    "interpolate_vertex_attributes",
    "face_normals",
    "shade_vertex_colors",
    "STF_LIGHT_DIRECTION",
]

# The direction of the fixed light of the STF renderer and of Blender's "basic" light mode
# (docs/behaviour.md#vertex-colours-and-shading).
STF_LIGHT_DIRECTION = (0.09387503, -0.63953443, -0.7630093)

# Faces with a vertex closer than this (camera z) are dropped instead of clipped: the encoder and
# renderer cameras sit at distance 4 from objects inside [-1, 1]^3, so nothing is ever that close.
_NEAR = 1e-4
# A pixel exactly on an edge shared by two triangles must not fall through both by rounding.
_EDGE_EPS = 1e-6
_EMPTY = torch.iinfo(torch.int64).max


@dataclass
class Fragments:
    """The nearest triangle at every pixel of `N` views.

    face_index: `[N, H, W]` int64, -1 where no triangle covers the pixel centre.
    bary: `[N, H, W, 3]` float32 perspective-correct barycentric weights of the face's 3 vertices
        (zeros on the background).
    depth: `[N, H, W]` float32 camera z-depth (distance along the camera's z axis), inf on the background.
    """

    face_index: torch.Tensor
    bary: torch.Tensor
    depth: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """`[N, H, W]` bool, True where a triangle was hit."""
        return self.face_index >= 0


def rasterize(
    verts: torch.Tensor, faces: torch.Tensor, camera: ProjectiveCamera, max_candidates: int = 1 << 20
) -> Fragments:
    """Rasterise one mesh in every view of `camera` (a `ProjectiveCamera` with `N` cameras).

    verts: `[V, 3]` float world positions; faces: `[F, 3]` int vertex indices.
    Returns `Fragments` with `[N, H, W]` maps in row-major image layout (row = image y, down).
    Faces with a vertex behind or within 1e-4 of a camera's plane are skipped for that camera.
    """
    if verts.ndim != 2 or verts.shape[-1] != 3:
        raise ValueError(f"verts must be [V, 3], got {tuple(verts.shape)}")
    if faces.ndim != 2 or faces.shape[-1] != 3:
        raise ValueError(f"faces must be [F, 3], got {tuple(faces.shape)}")
    if faces.numel() and (int(faces.min()) < 0 or int(faces.max()) >= verts.shape[0]):
        raise ValueError(f"faces index vertices outside [0, {verts.shape[0]}); check the mesh")
    if max_candidates < 1:
        raise ValueError(f"max_candidates must be positive, got {max_candidates}")
    verts = verts.float()
    faces = faces.long().to(verts.device)
    views = [
        _rasterize_view(verts, faces, camera, i, max_candidates) for i in range(camera.origin.shape[0])
    ]
    return Fragments(*(torch.stack(parts) for parts in zip(*views)))


def _project(verts: torch.Tensor, camera: ProjectiveCamera, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pixel coordinates `[V, 2]` (col, row) and camera z-depth `[V]` of the vertices in view `i`."""
    frame = torch.stack([camera.x[i], camera.y[i], camera.z[i]], dim=1).to(verts)  # [3, 3] columns
    cam = (verts - camera.origin[i].to(verts)) @ frame  # [V, 3] camera coordinates
    tans = torch.tensor(
        [math.tan(camera.x_fov / 2), math.tan(camera.y_fov / 2)], dtype=verts.dtype, device=verts.device
    )
    scale = torch.tensor([camera.width - 1, camera.height - 1], dtype=verts.dtype, device=verts.device)
    depth = cam[:, 2]
    screen = (cam[:, :2] / (depth[:, None] * tans) + 1) * 0.5 * scale
    return screen, depth


def _face_setup(screen: torch.Tensor, depth: torch.Tensor, faces: torch.Tensor, width: int, height: int):
    """Per-face pixel boxes and the 2x2 inverse mapping a pixel offset to barycentrics (b1, b2)."""
    tri = screen[faces]  # [F, 3, 2]
    tri_depth = depth[faces]  # [F, 3]
    e1 = tri[:, 1] - tri[:, 0]
    e2 = tri[:, 2] - tri[:, 0]
    det = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    lo = tri.amin(dim=1).ceil().clamp(min=0)
    limit = torch.tensor([width - 1, height - 1], dtype=tri.dtype, device=tri.device)
    hi = torch.minimum(tri.amax(dim=1).floor(), limit)
    size = (hi - lo + 1).clamp(min=0).long()  # [F, 2] (box width, box height)
    valid = (tri_depth > _NEAR).all(dim=1) & (det != 0) & torch.isfinite(tri).all(dim=(1, 2))
    count = torch.where(valid, size[:, 0] * size[:, 1], torch.zeros_like(size[:, 0]))
    safe_det = torch.where(det == 0, torch.ones_like(det), det)
    inverse = torch.stack([e2[:, 1], -e2[:, 0], -e1[:, 1], e1[:, 0]], dim=1) / safe_det[:, None]
    return tri[:, 0], inverse, tri_depth, lo.long(), size, count


def _barycentric(origin, inverse, px, py) -> torch.Tensor:
    """Screen-space barycentrics `[P, 3]` of pixel centres relative to each face's vertex 0."""
    # Offsets from vertex 0 are small numbers, which keeps float32 edge tests accurate.
    dx = px - origin[:, 0]
    dy = py - origin[:, 1]
    b1 = inverse[:, 0] * dx + inverse[:, 1] * dy
    b2 = inverse[:, 2] * dx + inverse[:, 3] * dy
    return torch.stack([1 - b1 - b2, b1, b2], dim=1)


def _perspective(bary: torch.Tensor, tri_depth: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Perspective-correct barycentrics and camera z-depth: 1/z is linear in screen space."""
    weighted = bary / tri_depth
    inv_depth = weighted.sum(dim=1)
    return weighted / inv_depth[:, None], 1 / inv_depth


def _chunks(count: torch.Tensor, max_candidates: int) -> Sequence[Tuple[int, int]]:
    """Split faces into consecutive ranges of at most `max_candidates` box pixels (or one big face)."""
    ends = torch.cumsum(count, 0)
    total = int(ends[-1]) if len(ends) else 0
    bounds, start, done = [], 0, 0
    while done < total:
        stop = int(torch.searchsorted(ends, done + max_candidates, right=True))
        stop = max(stop, start + 1)
        bounds.append((start, stop))
        done = int(ends[stop - 1])
        start = stop
    return bounds


def _rasterize_view(verts, faces, camera: ProjectiveCamera, i: int, max_candidates: int):
    """Face index, barycentric and depth maps `[H, W]` of view `i`."""
    width, height = camera.width, camera.height
    screen, depth = _project(verts, camera, i)
    origin, inverse, tri_depth, lo, size, count = _face_setup(screen, depth, faces, width, height)
    zbuf = torch.full((height * width,), _EMPTY, dtype=torch.int64, device=verts.device)
    for start, stop in _chunks(count, max_candidates):
        n = count[start:stop]
        face = torch.repeat_interleave(torch.arange(start, stop, device=verts.device), n)
        first = torch.cumsum(n, 0) - n
        k = torch.arange(len(face), device=verts.device) - torch.repeat_interleave(first, n)
        box_w = size[face, 0]
        px = lo[face, 0] + k % box_w
        py = lo[face, 1] + torch.div(k, box_w, rounding_mode="floor")
        bary = _barycentric(origin[face], inverse[face], px.to(verts.dtype), py.to(verts.dtype))
        inside = (bary >= -_EDGE_EPS).all(dim=1)
        face, px, py, bary = face[inside], px[inside], py[inside], bary[inside]
        _, z = _perspective(bary, tri_depth[face])
        key = (z.view(torch.int32).long() << 32) | face
        zbuf.scatter_reduce_(0, py * width + px, key, reduce="amin", include_self=True)
    return _resolve(zbuf, screen, origin, inverse, tri_depth, width, height)


def _resolve(zbuf, screen, origin, inverse, tri_depth, width, height):
    """Unpack the z-buffer into face index, barycentrics and depth maps `[H, W]`."""
    hit = zbuf != _EMPTY
    pixel = hit.nonzero().squeeze(1)
    face = zbuf[pixel] & 0xFFFFFFFF
    depth_bits = (zbuf[pixel] >> 32).to(torch.int32)
    px = (pixel % width).to(screen.dtype)
    py = torch.div(pixel, width, rounding_mode="floor").to(screen.dtype)
    bary, _ = _perspective(_barycentric(origin[face], inverse[face], px, py), tri_depth[face])
    face_map = torch.full((height * width,), -1, dtype=torch.int64, device=zbuf.device)
    face_map[pixel] = face
    bary_map = torch.zeros((height * width, 3), dtype=screen.dtype, device=zbuf.device)
    bary_map[pixel] = bary.clamp(0, 1)
    depth_map = torch.full((height * width,), float("inf"), dtype=screen.dtype, device=zbuf.device)
    depth_map[pixel] = depth_bits.view(torch.float32)
    return face_map.view(height, width), bary_map.view(height, width, 3), depth_map.view(height, width)


def interpolate_vertex_attributes(fragments: Fragments, faces: torch.Tensor, attrs: torch.Tensor) -> torch.Tensor:
    """Barycentric interpolation of per-vertex `attrs [V, C]` -> `[N, H, W, C]` (zeros on background)."""
    if attrs.ndim != 2:
        raise ValueError(f"attrs must be [V, C], got {tuple(attrs.shape)}; add a trailing channel axis")
    mask = fragments.mask
    out = attrs.new_zeros((*mask.shape, attrs.shape[1]))
    face = fragments.face_index[mask]
    corner = attrs[faces.long()[face]]  # [P, 3, C]
    out[mask] = (corner * fragments.bary[mask][..., None].to(attrs.dtype)).sum(dim=1)
    return out


def face_normals(verts: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
    """Unit normals `[F, 3]` by the right-hand rule `(v1 - v0) x (v2 - v0)`; zero for degenerate faces."""
    tri = verts[faces.long()]
    normal = torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1)
    norm = normal.norm(dim=-1, keepdim=True)
    return torch.where(norm > 0, normal / norm.clamp(min=1e-30), torch.zeros_like(normal))


def shade_vertex_colors(
    fragments: Fragments,
    verts: torch.Tensor,
    faces: torch.Tensor,
    colors: torch.Tensor,
    light_direction: Sequence[float] = STF_LIGHT_DIRECTION,
    ambient: Union[float, Sequence[float]] = 0.3,
    diffuse: Union[float, Sequence[float]] = 0.7,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Flat, two-sided diffuse shading: `color * (ambient + diffuse * |n . l|)`
    (docs/behaviour.md#vertex-colours-and-shading).

    colors: `[V, C]` per-vertex colours (any space; shading is applied to them as given).
    light_direction: a world-space direction (normalised here); the sign does not matter.
    ambient, diffuse: one intensity, or one per colour channel.
    Returns `rgb [N, H, W, C]` (zeros on background) and `alpha [N, H, W]` (1 where hit, else 0).
    """
    light = torch.tensor(light_direction, dtype=torch.float32, device=verts.device)
    light = light / light.norm()
    lambert = (face_normals(verts.float(), faces) @ light).abs()  # [F]
    ambient = torch.as_tensor(ambient, dtype=torch.float32, device=verts.device).reshape(-1)
    diffuse = torch.as_tensor(diffuse, dtype=torch.float32, device=verts.device).reshape(-1)
    brightness = ambient + diffuse * lambert[:, None]  # [F, 1 or C]
    mask = fragments.mask
    rgb = interpolate_vertex_attributes(fragments, faces, colors.float())
    shade = torch.zeros(*mask.shape, brightness.shape[-1], dtype=rgb.dtype, device=rgb.device)
    shade[mask] = brightness[fragments.face_index[mask]]
    return rgb * shade, mask.to(rgb.dtype)
