"""Official entry point `shap_e.util.data_util`: a facade over `shap_e.encoding`, without Blender.

`load_or_create_multimodal_batch` builds the encoder's input from a 3D asset file (surface-sampled
point cloud, views from the torch rasteriser). The official building blocks keep their names and
conventions: `load_or_create_pc` and `load_or_create_multiview` give a `PointCloud` and views in
Blender units (the asset in a unit box, cameras at distance 2, 512 x 512 views), which
`normalize_input_batch(pc_scale=2, color_scale=1/255)` scales to the encoder's; `mv_to_pc`,
`process_image` and `process_depth` are the official per-view steps.
"""
import os
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, Optional, Tuple, Union

import numpy as np
import torch
from PIL import Image

from shap_e.encoding.assets import load_asset
from shap_e.encoding.batch import LIGHT_MODES, file_cache_key
from shap_e.encoding.batch import load_or_create_multimodal_batch as _load_or_create_batch
from shap_e.encoding.batch import load_or_create_multimodal_batches
from shap_e.encoding.point_cloud import sample_point_cloud
from shap_e.encoding.views import render_multiview
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.rendering.point_cloud import PointCloud
from shap_e.rendering.view_data import MemoryViewData, ProjectiveCamera, ViewData
from shap_e.util.atomic import write_atomic_with
from shap_e.util.collections import AttrDict
from shap_e.util.image_util import center_crop, get_alpha, remove_alpha, resize

__all__ = [
    "load_or_create_multimodal_batch",
    "load_or_create_multimodal_batches",
    "load_or_create_multiview",
    "load_or_create_pc",
    "mv_to_pc",
    "normalize_input_batch",
    "process_depth",
    "process_image",
]

# The official renders see the asset normalised to a unit box (Blender units); the encoder reads
# coordinates scaled by 2 (`normalize_input_batch(pc_scale=2)`), which is this package's own frame.
BLENDER_SCALE = 0.5
BLENDER_VIEW_SIZE = 512


def load_or_create_multimodal_batch(
    device: torch.device,
    *,
    mesh_path: Optional[str] = None,
    model_path: Optional[str] = None,
    cache_dir: Optional[str] = None,
    point_count: int = 2**14,
    random_sample_count: int = 2**19,
    pc_num_views: int = 40,
    mv_light_mode: Optional[str] = None,
    mv_num_views: int = 20,
    mv_image_size: int = 512,
    mv_alpha_removal: str = "black",
    verbose: bool = False,
    **kwargs,
) -> MultimodalBatch:
    """The encoder input for one asset file, with the official defaults (views of 512 x 512).

    See `shap_e.encoding.batch.load_or_create_multimodal_batch` (kwargs: `seed`, `up_axis`).
    """
    return _load_or_create_batch(
        device, mesh_path=mesh_path, model_path=model_path, cache_dir=cache_dir, point_count=point_count,
        random_sample_count=random_sample_count, pc_num_views=pc_num_views, mv_light_mode=mv_light_mode,
        mv_num_views=mv_num_views, mv_image_size=mv_image_size, mv_alpha_removal=mv_alpha_removal,
        verbose=verbose, **kwargs,
    )


def load_or_create_pc(
    *,
    mesh_path: Optional[str],
    model_path: Optional[str],
    cache_dir: Optional[str],
    random_sample_count: int,
    point_count: int,
    num_views: int,
    verbose: bool = False,
) -> PointCloud:
    """`point_count` farthest-point-sampled surface points of the asset (Blender units, unit box),
    channels R, G, B (sRGB in [0, 1]) averaged over `random_sample_count` candidates; cached in
    `cache_dir` by file content. `num_views` is accepted and unused: the points come from the
    surface, not from back-projected renders."""
    path = _one_path(mesh_path, model_path)
    cache = _cache_file(cache_dir, path, "pc", random_sample_count=random_sample_count, point_count=point_count)
    if cache is not None and os.path.exists(cache):
        return PointCloud.load(cache)
    start = time.perf_counter()
    points = sample_point_cloud(
        load_asset(path), point_count, torch.Generator().manual_seed(0), n_candidates=max(random_sample_count, point_count)
    ).numpy()
    pc = PointCloud(coords=points[:3].T * BLENDER_SCALE, channels=dict(zip("RGB", points[3:])))
    if verbose:
        print(f"point cloud of {path}: {time.perf_counter() - start:.2f} s")
    if cache is not None:
        pc.save(cache)
    return pc


@contextmanager
def load_or_create_multiview(
    *,
    mesh_path: Optional[str],
    model_path: Optional[str],
    cache_dir: Optional[str],
    num_views: int = 20,
    extract_material: bool = True,
    light_mode: Optional[str] = None,
    verbose: bool = False,
) -> Iterator[ViewData]:
    """`with load_or_create_multiview(...) as views:` 512 x 512 renders of the asset as a
    `MemoryViewData`: channels R, G, B, A in [0, 1] and D (z-depth, inf where empty), numpy cameras,
    all in Blender units; cached in `cache_dir` by file content.

    light_mode: None (the surface colours, unlit) or "basic" (ambient + diffuse). The official
    "random", "uniform" and "camera" modes need Blender. `extract_material` is accepted: the colours
    are always the material's.
    """
    if light_mode not in LIGHT_MODES:
        raise ValueError(f"light_mode must be one of {LIGHT_MODES} without Blender, got {light_mode!r}")
    path = _one_path(mesh_path, model_path)
    cache = _cache_file(cache_dir, path, "mv", num_views=num_views, light_mode=light_mode)
    if cache is not None and os.path.exists(cache):
        with np.load(cache) as arrays:
            data = dict(arrays)
    else:
        start = time.perf_counter()
        data = _render_views(path, num_views, light_mode == "basic")
        if verbose:
            print(f"{num_views} views of {path}: {time.perf_counter() - start:.2f} s")
        if cache is not None:
            write_atomic_with(cache, lambda tmp: np.savez(tmp, **data))
    meta = data.pop("camera_meta")
    frames = [data.pop(key) for key in ("origin", "x", "y", "z")]
    cameras = [
        ProjectiveCamera(
            origin=o, x=x, y=y, z=z, width=int(meta[0]), height=int(meta[1]), x_fov=float(meta[2]), y_fov=float(meta[3])
        )
        for o, x, y, z in zip(*frames)
    ]
    yield MemoryViewData(data, cameras)


def _render_views(path: str, num_views: int, lit: bool) -> dict:
    renders = render_multiview(load_asset(path), num_views, BLENDER_VIEW_SIZE, "black", lit=lit)
    cameras = renders.cameras
    rgb = ((renders.views + 1) / 2).numpy()
    return dict(
        R=rgb[:, 0], G=rgb[:, 1], B=rgb[:, 2], A=renders.alphas[:, 0].numpy(),
        D=renders.depths[:, 0].numpy() * BLENDER_SCALE,
        origin=cameras.origin.numpy() * BLENDER_SCALE, x=cameras.x.numpy(), y=cameras.y.numpy(), z=cameras.z.numpy(),
        camera_meta=np.array([cameras.width, cameras.height, cameras.x_fov, cameras.y_fov]),
    )


def mv_to_pc(multiview: ViewData, random_sample_count: int, point_count: int) -> PointCloud:
    """The official point cloud of rendered views: every opaque pixel with a finite depth
    back-projected (`PointCloud.from_rgbd`), duplicated with 1e-4 jitter until there are
    `point_count`, `random_sample_count` of them drawn, then `point_count` by farthest-point
    sampling with colours averaged over each point's neighbours (NumPy's and Python's global RNGs)."""
    pc = PointCloud.from_rgbd(multiview)
    if len(pc.coords) == 0:
        pc = PointCloud(coords=np.zeros([1, 3]), channels={name: np.zeros([1]) for name in "RGB"})
    while len(pc.coords) < point_count:
        pc = pc.combine(pc)
        pc.coords = pc.coords + np.random.normal(size=pc.coords.shape) * 1e-4
    pc = pc.random_sample(random_sample_count)
    return pc.farthest_point_sample(point_count, average_neighbors=True)


def normalize_input_batch(
    batch: Union[AttrDict, MultimodalBatch], *, pc_scale: float, color_scale: float
) -> Union[AttrDict, MultimodalBatch]:
    """A copy of `batch` with point coordinates, camera origins and depths scaled by `pc_scale` and
    point colours by `color_scale` (the official batch: `points [B, 6, N]`, `cameras` and `depths`
    as lists of per-view lists; or a typed `MultimodalBatch`)."""
    scale = torch.tensor([pc_scale] * 3 + [color_scale] * 3, dtype=batch.points.dtype, device=batch.points.device)
    points = batch.points * scale[:, None]
    if isinstance(batch, MultimodalBatch):
        cameras = None if batch.cameras is None else replace(batch.cameras, origin=batch.cameras.origin * pc_scale)
        depths = None if batch.depths is None else batch.depths * pc_scale
        return replace(batch, points=points, cameras=cameras, depths=depths)
    out = AttrDict(batch)
    out.points = points
    if "cameras" in out:
        out.cameras = [[camera.scale_scene(pc_scale) for camera in cameras] for cameras in out.cameras]
    if "depths" in out:
        out.depths = [[depth * pc_scale for depth in depths] for depths in out.depths]
    return out


def process_depth(depth_img: np.ndarray, image_size: int) -> np.ndarray:
    """A depth image `[H, W]` centre-cropped to a square and area-resized to `image_size`."""
    depth_img = center_crop(depth_img)
    return np.squeeze(resize(depth_img, width=image_size, height=image_size))


def process_image(
    img_or_img_arr: Union[Image.Image, np.ndarray], alpha_removal: str, image_size: int
) -> Tuple[Image.Image, Image.Image]:
    """A view for the encoder: centre crop, alpha split, background removal (`alpha_removal`:
    "black", "white" or "random"), then the RGB image and the alpha each bilinearly resized to
    `image_size` -> (rgb, alpha) PIL images. A grayscale array or image becomes RGB first."""
    img = Image.fromarray(img_or_img_arr) if isinstance(img_or_img_arr, np.ndarray) else img_or_img_arr
    if img.mode in ("L", "I", "F"):
        img = img.convert("RGB")
    img = center_crop(img)
    alpha = get_alpha(img)
    img = remove_alpha(img, mode=alpha_removal)
    size = (image_size, image_size)
    return img.resize(size, resample=Image.BILINEAR), alpha.resize(size, resample=Image.BILINEAR)


def _one_path(mesh_path: Optional[str], model_path: Optional[str]) -> str:
    if (mesh_path is None) == (model_path is None):
        raise ValueError("pass exactly one of mesh_path or model_path")
    return mesh_path if mesh_path is not None else model_path


def _cache_file(cache_dir: Optional[str], path: str, kind: str, **args) -> Optional[str]:
    if cache_dir is None:
        return None
    os.makedirs(cache_dir, exist_ok=True)
    return os.path.join(cache_dir, f"{kind}_{file_cache_key(path, {'kind': kind, **args})}.npz")
