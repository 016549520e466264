"""Photo-like conditioning pictures of an asset, for training a prior that owns its image encoder.

At sampling time a user gives a photo of one object, like `notebooks/example_data/red_chair.png`:
seen a little from above, centred, filling most of the frame, on a white background. The training
renders imitate that: elevation uniform in [15, 35] degrees, azimuth uniform, Blender's default lens
(`BLENDER_DEFAULT_FOV`, a normal photo lens), and for each view the camera distance at which the
mesh's farthest projected vertex sits at `fill` (0.7) of the half-frame from the image centre.
Shading, colour space and 8-bit quantisation follow `shap_e.encoding.views.render_multiview` (flat
faces lit by the fixed STF light, `0.3 + 0.7 |n . l|`, linear -> sRGB); edges are anti-aliased by
rendering at `supersample`x the size and averaging, since user photos are smooth.
"""
import math
from pathlib import Path
from typing import Tuple, Union

import torch
import torch.nn.functional as F

from shap_e.rendering.cameras import ProjectiveCamera, look_at
from shap_e.rendering.rasterize import rasterize
from shap_e.encoding.assets import AssetMesh, load_asset
from shap_e.encoding.views import BLENDER_DEFAULT_FOV, shade

__all__ = ["photo_cameras", "render_condition_images"]

PHOTO_ELEVATION_DEG = (15.0, 35.0)
PHOTO_AZIMUTH_DEG = (0.0, 360.0)
PHOTO_FILL = 0.7


def photo_cameras(
    verts: torch.Tensor,
    n_views: int,
    size: int,
    generator: torch.Generator,
    elevation_deg: Tuple[float, float] = PHOTO_ELEVATION_DEG,
    fill: float = PHOTO_FILL,
    azimuth_deg: Tuple[float, float] = PHOTO_AZIMUTH_DEG,
) -> ProjectiveCamera:
    """`n_views` cameras looking at the origin from random photo-like directions, framed on `verts`.

    :param verts: `[V, 3]` the mesh's vertices (already centred, e.g. by `load_asset`).
    :param generator: draws the elevations, then the azimuths (CPU generator).
    :param fill: the farthest projected vertex lands at `fill` of the half-frame from the centre.
    :param azimuth_deg: the range of camera azimuths, counter-clockwise from +X. A narrow range
        keeps the object's yaw visible in the picture (a prior that must reproduce the world-frame
        orientation is trained on such pictures).
    """
    if not 0 < fill <= 1:
        raise ValueError(f"fill={fill} must be in (0, 1]: the fraction of the half-frame the object spans")
    low, high = (math.radians(e) for e in elevation_deg)
    if not -math.pi / 2 < low <= high < math.pi / 2:
        raise ValueError(f"elevation_deg={elevation_deg} must be an increasing pair inside (-90, 90)")
    elevation = low + (high - low) * torch.rand(n_views, generator=generator, dtype=torch.float64)
    az_low, az_high = (math.radians(a) for a in azimuth_deg)
    if az_high < az_low:
        raise ValueError(f"azimuth_deg={azimuth_deg} must be an increasing pair")
    azimuth = az_low + (az_high - az_low) * torch.rand(n_views, generator=generator, dtype=torch.float64)
    toward_camera = torch.stack(
        [elevation.cos() * azimuth.cos(), elevation.cos() * azimuth.sin(), elevation.sin()], dim=1
    ).float().to(verts.device)  # [n_views, 3] unit vectors from the origin to the camera
    unit = look_at(toward_camera, torch.zeros_like(toward_camera), size, size, fov=BLENDER_DEFAULT_FOV)
    points = verts.float()
    lateral = torch.maximum((points @ unit.x.T).abs(), (points @ unit.y.T).abs())  # [V, n_views]
    # A vertex at height s toward the camera and lateral offset l projects to l / (d - s) of
    # tan(fov / 2); the smallest d that keeps every vertex within `fill` is this maximum.
    distance = (points @ toward_camera.T + lateral / (fill * math.tan(BLENDER_DEFAULT_FOV / 2))).amax(dim=0)
    origins = toward_camera * distance[:, None]
    return look_at(origins, torch.zeros_like(origins), size, size, fov=BLENDER_DEFAULT_FOV)


def render_condition_images(
    mesh_or_path: Union[AssetMesh, str, Path],
    n_views: int,
    size: int = 64,
    seed: int = 0,
    supersample: int = 2,
    elevation_deg: Tuple[float, float] = PHOTO_ELEVATION_DEG,
    fill: float = PHOTO_FILL,
    azimuth_deg: Tuple[float, float] = PHOTO_AZIMUTH_DEG,
) -> torch.Tensor:
    """Photo-like renders of one asset: `[n_views, 3, size, size]` float32 in [-1, 1] (8-bit values).

    :param mesh_or_path: an `AssetMesh` in [-1, 1]^3 (+Z up) or a mesh file (loaded with `load_asset`).
    :param seed: the views are a function of the seed alone.
    :param supersample: render at `supersample * size` and average down (1: no anti-aliasing).
    """
    if n_views < 1 or size < 2 or supersample < 1:
        raise ValueError(
            f"need n_views >= 1, size >= 2 and supersample >= 1, got {n_views}, {size}, {supersample}"
        )
    mesh = mesh_or_path if isinstance(mesh_or_path, AssetMesh) else load_asset(str(mesh_or_path))
    generator = torch.Generator().manual_seed(seed)
    cameras = photo_cameras(mesh.verts, n_views, size * supersample, generator, elevation_deg, fill, azimuth_deg)
    srgb = shade(mesh, rasterize(mesh.verts, mesh.faces, cameras), background=1.0).permute(0, 3, 1, 2)
    if supersample > 1:
        srgb = F.avg_pool2d(srgb, supersample)
    # 8-bit quantisation, as the PNG or JPEG photos given at sampling time.
    return (torch.round(srgb * 255) / 127.5 - 1).cpu().contiguous()
