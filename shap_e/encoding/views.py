"""Multiview RGB / alpha / z-depth renders of an asset for the encoder, without Blender.

Replaces the official Blender "basic" light mode renders (docs/behaviour.md#multimodal-batch) with the torch
rasteriser. Lighting as Blender's basic mode: unlit (linear) surface colour times
`0.3 + 0.7 * |n . l|` with the fixed world-space direction `l = STF_LIGHT_DIRECTION` and flat face
normals, then linear -> sRGB and 8-bit quantisation, like a PNG render. No anti-aliasing: alpha is 0
or 1.

Cameras: Blender's default camera (50 mm lens on a 36 mm sensor, fov 2 atan(18/50) = 0.6911 rad) at
distance 4 from the origin (2 in Blender units, x2 after normalisation), looking at the origin with
world +Z up. The official renders use random view directions; here they are fixed and evenly spread:
the Fibonacci sphere, view `i` of `n` seen from direction `(r cos(i g), r sin(i g), 1 - (2i + 1)/n)`
with `r = sqrt(1 - z^2)` and the golden angle `g = pi (3 - sqrt 5)`, so no view looks straight
along +-Z.
"""
import math
from dataclasses import dataclass

import torch

from shap_e.rendering.cameras import ProjectiveCamera, look_at
from shap_e.rendering.rasterize import STF_LIGHT_DIRECTION, face_normals, rasterize
from shap_e.rendering.color import linear_to_srgb
from shap_e.encoding.assets import AssetMesh

__all__ = ["MultiviewRenders", "BLENDER_DEFAULT_FOV", "multiview_cameras", "render_multiview"]

BLENDER_DEFAULT_FOV = 2 * math.atan(18 / 50)
CAMERA_DISTANCE = 4.0
ALPHA_REMOVAL_MODES = ("black", "white")


@dataclass
class MultiviewRenders:
    """Renders of one asset in the encoder's conventions (docs/behaviour.md#multiview-features).

    views: `[V, 3, S, S]` colours in [-1, 1] (8-bit sRGB / 127.5 - 1), background removed.
    depths: `[V, 1, S, S]` camera z-depth, inf where empty.
    alphas: `[V, 1, S, S]` coverage in {0, 1}.
    cameras: the `V` cameras, `shape == (V,)`.
    """

    views: torch.Tensor
    depths: torch.Tensor
    alphas: torch.Tensor
    cameras: ProjectiveCamera


def multiview_cameras(n_views: int = 20, size: int = 256, device=None) -> ProjectiveCamera:
    """`n_views` cameras on the Fibonacci sphere of radius 4, looking at the origin (+Z up)."""
    if n_views < 1 or size < 2:
        raise ValueError(f"need n_views >= 1 and size >= 2, got n_views={n_views}, size={size}")
    i = torch.arange(n_views, dtype=torch.float64)
    z = 1 - (2 * i + 1) / n_views
    r = (1 - z * z).sqrt()
    angle = i * math.pi * (3 - math.sqrt(5))
    directions = torch.stack([r * angle.cos(), r * angle.sin(), z], dim=1)
    origins = (CAMERA_DISTANCE * directions).float().to(device)
    return look_at(origins, torch.zeros_like(origins), size, size, fov=BLENDER_DEFAULT_FOV)


def render_multiview(
    mesh: AssetMesh, n_views: int = 20, size: int = 256, alpha_removal: str = "black", lit: bool = True
) -> MultiviewRenders:
    """Render `mesh` (already in [-1, 1]^3) from `multiview_cameras(n_views, size)`.

    lit: shade as Blender's "basic" light mode (default); False gives the unlit surface colours
    (the official renders with material extraction and no light mode, which its point clouds read).
    """
    if alpha_removal not in ALPHA_REMOVAL_MODES:
        raise ValueError(f"alpha_removal must be one of {ALPHA_REMOVAL_MODES}, got {alpha_removal!r}")
    cameras = multiview_cameras(n_views, size, device=mesh.verts.device)
    frags = rasterize(mesh.verts, mesh.faces, cameras)
    srgb = shade(mesh, frags, background=0.0 if alpha_removal == "black" else 1.0, lit=lit)
    # 8-bit quantisation as in the PNG renders the encoder was trained on.
    views = torch.round(srgb * 255) / 127.5 - 1
    return MultiviewRenders(
        views=views.permute(0, 3, 1, 2).contiguous(),
        depths=frags.depth[:, None],
        alphas=frags.mask[:, None].float(),
        cameras=cameras,
    )


def shade(mesh: AssetMesh, frags, background: float, lit: bool = True) -> torch.Tensor:
    """`[N, H, W, 3]` sRGB in [0, 1]: the mesh's colours lit by the fixed STF light
    (`0.3 + 0.7 |n . l|`, flat per face; unlit when not `lit`) where `frags` (from `rasterize`) hit,
    `background` elsewhere."""
    mask = frags.mask
    face = frags.face_index[mask]
    linear = mesh.colors_at(face, frags.bary[mask])
    if lit:
        light = torch.tensor(STF_LIGHT_DIRECTION, device=mesh.verts.device)
        brightness = 0.3 + 0.7 * (face_normals(mesh.verts, mesh.faces)[face] @ (light / light.norm())).abs()
        linear = linear * brightness[:, None]
    srgb = torch.full((*mask.shape, 3), background, device=mesh.verts.device)
    srgb[mask] = linear_to_srgb(linear.clamp(0, 1))
    return srgb
