"""Build (and cache) the encoder's `MultimodalBatch` from 3D asset files, without Blender.

Official counterpart: `shap_e.util.data_util.load_or_create_multimodal_batch`
(docs/behaviour.md#multimodal-batch), which renders the asset twice in Blender. Here the point cloud
is sampled from the surface (`shap_e.encoding.point_cloud`) and the views come from the torch
rasteriser (`shap_e.encoding.views`).
"""
import hashlib
import json
import os
import time
from typing import Dict, Optional, Sequence

import torch

from shap_e.rendering.cameras import ProjectiveCamera
from shap_e.encoding.assets import load_asset
from shap_e.util.atomic import write_atomic_with
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.encoding.views import render_multiview
from shap_e.encoding.point_cloud import sample_point_cloud

__all__ = ["load_or_create_multimodal_batch", "load_or_create_multimodal_batches"]

# Bump when the produced data changes, so stale cache files are not reused.
_CACHE_VERSION = 1
LIGHT_MODES = (None, "basic")


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
    mv_image_size: int = 256,
    mv_alpha_removal: str = "black",
    verbose: bool = False,
    seed: int = 0,
    up_axis: str = "auto",
) -> MultimodalBatch:
    """The encoder input for one asset file: `points [1, 6, point_count]` and, if `mv_light_mode` is
    set, `views [1, V, 3, S, S]`, `depths`/`view_alphas [1, V, 1, S, S]` and cameras of shape `(1, V)`.

    mesh_path / model_path: the asset (exactly one of them); any format `load_asset` reads.
    cache_dir: if given, results are stored there keyed by the file's SHA-256 and all arguments that
        change the output (the key covers the main file only: clear the cache after editing its
        textures or MTL).
    point_count / random_sample_count: FPS points kept / surface candidates drawn.
    pc_num_views: accepted for compatibility and ignored (points are sampled from the surface, not
        back-projected from Blender renders).
    mv_light_mode: None (no views) or "basic" (ambient + diffuse shading); the official "random",
        "uniform" and "camera" modes need Blender and are rejected.
    mv_alpha_removal: "black" or "white" background.
    verbose: print the time of each stage.
    seed: seeds the surface sampling and the first FPS point; the views are deterministic.
    up_axis: see `load_asset` ("auto" turns OBJ/glTF +Y-up files to +Z up as Blender does).
    """
    path = _check_arguments(mesh_path, model_path, mv_light_mode, mv_image_size, point_count, random_sample_count)
    key_args = dict(
        point_count=point_count, random_sample_count=random_sample_count, mv_light_mode=mv_light_mode,
        mv_num_views=mv_num_views, mv_image_size=mv_image_size, mv_alpha_removal=mv_alpha_removal,
        seed=seed, up_axis=up_axis, version=_CACHE_VERSION,
    )
    cache_path = None
    if cache_dir is not None:
        cache_path = os.path.join(cache_dir, f"mmbatch_{file_cache_key(path, key_args)}.pt")
        if os.path.exists(cache_path):
            return _from_dict(torch.load(cache_path, weights_only=True)).to(device)
    data = _create(path, device, key_args, verbose)
    if cache_path is not None:
        _atomic_save(data, cache_path)
    return _from_dict(data).to(device)


def load_or_create_multimodal_batches(
    paths: Sequence[str], device: torch.device, progress: bool = True, **kwargs
) -> MultimodalBatch:
    """One batch of `len(paths)` assets (model files), stacked along the batch axis.

    kwargs are those of `load_or_create_multimodal_batch` (except mesh_path/model_path). One tqdm
    progress bar covers all assets when `progress` is True.
    """
    from tqdm.auto import tqdm

    if not paths:
        raise ValueError("paths is empty; pass at least one asset file")
    batches = [
        load_or_create_multimodal_batch(device, model_path=p, **kwargs)
        for p in tqdm(paths, desc="assets", disable=not progress)
    ]
    return stack_batches(batches)


def _check_arguments(mesh_path, model_path, mv_light_mode, mv_image_size, point_count, random_sample_count) -> str:
    if (mesh_path is None) == (model_path is None):
        raise ValueError("pass exactly one of mesh_path or model_path")
    if mv_light_mode not in LIGHT_MODES:
        raise ValueError(
            f"mv_light_mode must be one of {LIGHT_MODES} without Blender, got {mv_light_mode!r}"
        )
    if mv_image_size < 2:
        raise ValueError(f"mv_image_size must be at least 2 (the encoder expects 256), got {mv_image_size}")
    if not 1 <= point_count <= random_sample_count:
        raise ValueError(
            f"need 1 <= point_count <= random_sample_count, got {point_count} and {random_sample_count}"
        )
    return mesh_path if mesh_path is not None else model_path


def _create(path: str, device: torch.device, args: Dict, verbose: bool) -> Dict:
    generator = torch.Generator().manual_seed(args["seed"])
    timer = _StageTimer(verbose)
    mesh = load_asset(path, up_axis=args["up_axis"])
    timer("load asset")
    # Farthest-point sampling is a loop of small steps, each waiting on the last: on a GPU it is
    # launch-bound (4x slower than one CPU core, measured on an H200). On the CPU it also gives
    # the same point cloud whatever the device.
    points = sample_point_cloud(mesh, args["point_count"], generator, n_candidates=args["random_sample_count"])
    timer("point cloud")
    data = {"points": points[None]}
    if args["mv_light_mode"] is not None:
        renders = render_multiview(
            mesh.to(device), args["mv_num_views"], args["mv_image_size"], args["mv_alpha_removal"]
        )
        timer("multiview renders")
        cam = renders.cameras
        data.update(
            views=renders.views[None].cpu(),
            depths=renders.depths[None].cpu(),
            view_alphas=renders.alphas[None].cpu(),
            camera_origin=cam.origin.cpu(), camera_x=cam.x.cpu(), camera_y=cam.y.cpu(), camera_z=cam.z.cpu(),
            camera_meta=torch.tensor([cam.width, cam.height]),
            camera_fov=torch.tensor([cam.x_fov, cam.y_fov], dtype=torch.float64),
        )
    return data


def _from_dict(data: Dict) -> MultimodalBatch:
    if "views" not in data:
        return MultimodalBatch(points=data["points"])
    n_views = data["views"].shape[1]
    width, height = (int(v) for v in data["camera_meta"])
    x_fov, y_fov = (float(v) for v in data["camera_fov"])
    cameras = ProjectiveCamera(
        origin=data["camera_origin"], x=data["camera_x"], y=data["camera_y"], z=data["camera_z"],
        width=width, height=height, x_fov=x_fov, y_fov=y_fov, shape=(1, n_views),
    )
    return MultimodalBatch(
        points=data["points"], views=data["views"], depths=data["depths"],
        view_alphas=data["view_alphas"], cameras=cameras,
    )


def stack_batches(batches: Sequence[MultimodalBatch]) -> MultimodalBatch:
    """Concatenate single- or multi-asset batches along the batch axis (cameras get shape (B, V))."""
    first = batches[0]
    if first.views is None:
        return MultimodalBatch(points=torch.cat([b.points for b in batches]))
    cams = [b.cameras for b in batches]
    cameras = ProjectiveCamera(
        origin=torch.cat([c.origin for c in cams]), x=torch.cat([c.x for c in cams]),
        y=torch.cat([c.y for c in cams]), z=torch.cat([c.z for c in cams]),
        width=first.cameras.width, height=first.cameras.height,
        x_fov=first.cameras.x_fov, y_fov=first.cameras.y_fov,
        shape=(len(batches), first.views.shape[1]),
    )
    return MultimodalBatch(
        points=torch.cat([b.points for b in batches]),
        views=torch.cat([b.views for b in batches]),
        depths=torch.cat([b.depths for b in batches]),
        view_alphas=torch.cat([b.view_alphas for b in batches]),
        cameras=cameras,
    )


def file_cache_key(path: str, args: Dict) -> str:
    """32 hex digits of the SHA-256 of a file's bytes and the JSON of `args` (cache file names)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    digest.update(json.dumps(args, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def _atomic_save(data: Dict, path: str) -> None:
    """torch.save through a temporary in the same folder (no half-written cache files)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic_with(path, lambda tmp: torch.save(data, tmp))


class _StageTimer:
    """Prints the seconds since the previous call when verbose."""

    def __init__(self, verbose: bool):
        self.verbose = verbose
        self.last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        if self.verbose:
            print(f"{stage}: {now - self.last:.2f} s")
        self.last = now
