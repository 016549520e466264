"""The official AttrDict boundary of `NeRSTFRenderer`: `render_views(batch, params, options)` and
`render_rays(batch, params, options)`, adapters over its typed `render_cameras` and `trace_rays`.

Batch keys: `cameras` (a `DifferentiableCameraBatch`; or `pose` + `camera`), optional `height` and
`width`, `ray_batch_size` (else `inner_batch_size`, else 4096) and `query_batch_size` (STF grid
queries; default the ray batch size).

Options (`OPTIONS`): `rendering_mode` ("stf", default, or "nerf"), `render_with_direction`
(default True, as the official renderer; the notebooks pass False), `render_background` (default
True), and four of this package: `mesh_mode` ("exact", default here: every grid sample, so `fields`,
`raw_signed_distance` and `raw_density` are the official ones; "fast" gives the same mesh from a
narrow band), `query_dtype` (None or torch.bfloat16), `reference_queries` (NeRF: re-query every
sample as the official code; the default skips rays that miss the box, whose raw outputs then read
0) and `rasterizer` (STF views: "torch", default, or "pytorch3d" where it is installed). The official
gradient-checkpointing flags are accepted and have no effect on the result.
"""
from typing import Any, Mapping, Optional

import torch

from shap_e.models.nn.camera import DifferentiableProjectiveCamera
from shap_e.models.ray_renderer import get_camera_from_batch, render_views_from_rays
from shap_e.models.stf.renderer import cross_entropy_sdf_loss
from shap_e.util.collections import AttrDict

__all__ = ["OPTIONS", "render_rays", "render_views"]

OPTIONS = {
    "rendering_mode": "stf",
    "render_with_direction": True,
    "render_background": True,
    "mesh_mode": "exact",
    "query_dtype": None,
    "reference_queries": False,
    "rasterizer": "torch",
    "checkpoint_render": False,
    "checkpoint_nerf_mlp": False,
    "checkpoint_stf_model": False,
}
DEFAULT_RAY_BATCH_SIZE = 4096
QUERY_BATCH_SIZE = 8192  # field points per MLP call in NeRF mode, as `render_cameras`


def read_options(options: Optional[Mapping[str, Any]]) -> AttrDict:
    """`OPTIONS` updated with `options`; an unknown option is a ValueError naming the valid ones."""
    options = AttrDict() if options is None else AttrDict(options)
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"options {unknown} are not supported by NeRSTFRenderer; valid options: {sorted(OPTIONS)}")
    return AttrDict({**OPTIONS, **options})


def render_views(renderer, batch: Mapping[str, Any], params=None, options=None) -> AttrDict:
    """`renderer.render_views(batch, params, options)`: see the module docstring.

    params: `bottleneck_to_params(latent)` (`nerstf.mlp.{i}.weight [batch, d_out, d_in]`), or None
    for the renderer's stored weights. Returns an AttrDict of `[batch, *inner, H, W, channels]`
    tensors: `channels` (0..255), `transmittance`, and in NeRF mode `depth`, `distances`, `t0`, `t1`,
    `intersected`, `channels_coarse`, `transmittance_coarse`, `distances_coarse`,
    `raw_signed_distance`, `raw_density`; in STF mode `raw_meshes` (a TorchMesh per batch element,
    linear vertex colours), `mesh_mask [batch]`, `fields [batch, G + 2, G + 2, G + 2]`,
    `raw_signed_distance` and `raw_density` `[batch, G^3, 1]`. `aux_losses` holds the STF
    `cross_entropy` sign loss (empty in NeRF mode).
    """
    batch, options = AttrDict(batch), read_options(options)
    camera, batch_size, inner_shape = get_camera_from_batch(batch)
    ray_batch_size = int(batch.get("ray_batch_size", batch.get("inner_batch_size", DEFAULT_RAY_BATCH_SIZE)))
    if options.rendering_mode == "nerf" and not isinstance(camera, DifferentiableProjectiveCamera):
        return render_views_from_rays(renderer.render_rays, batch, params, options, device=renderer.device)
    if not isinstance(camera, DifferentiableProjectiveCamera):
        raise TypeError(f"STF rendering needs projective cameras, got {type(camera).__name__}")
    out = renderer.render_cameras(
        camera.projective((batch_size, *inner_shape)), _params(renderer, params, batch_size),
        rendering_mode=options.rendering_mode,
        render_with_direction=bool(options.render_with_direction) and options.rendering_mode == "nerf",
        ray_batch_size=ray_batch_size, query_batch_size=batch.get("query_batch_size"),
        mesh_mode=options.mesh_mode, reference_queries=options.reference_queries, query_dtype=options.query_dtype,
        render_background=options.render_background, rasterizer=options.rasterizer,
    )
    fields = {name: value for name, value in vars(out).items() if value is not None and name != "meshes"}
    result = AttrDict(fields)
    result.aux_losses = AttrDict()
    if options.rendering_mode == "stf":
        result.raw_meshes = out.meshes
        result.aux_losses.cross_entropy = cross_entropy_sdf_loss(out.fields)
    return result


def render_rays(renderer, batch: Mapping[str, Any], params=None, options=None) -> AttrDict:
    """`renderer.render_rays(batch, params, options)`: the NeRF pass over `batch.rays [batch, n_rays,
    2, 3]` (random draws from the global RNG, as the official code) -> AttrDict of `[batch, n_rays,
    channels]`: `channels` (0..255), `transmittance`, `distances`, `t0`, `t1`, `intersected`, the
    coarse pass's `channels_coarse`, `transmittance_coarse`, `distances_coarse`, and
    `raw_signed_distance`, `raw_density` (fine samples); `aux_losses` is empty."""
    batch, options = AttrDict(batch), read_options(options)
    rays = batch.get("rays")
    if not isinstance(rays, torch.Tensor) or rays.ndim != 4 or rays.shape[-2:] != (2, 3):
        raise ValueError(f"batch.rays must be a [batch, n_rays, 2, 3] tensor of (origin, direction), got {rays!r}")
    rays = rays.to(renderer.device)
    params = _params(renderer, params, rays.shape[0])
    renderer.mlp_params(params, rays.shape[0])  # checks the batch size against the rays'
    field = renderer.field(params, batch.get("query_batch_size", QUERY_BATCH_SIZE), options.query_dtype)
    background = renderer.void.background
    if not options.render_background:
        background = torch.zeros_like(background)
    out = renderer.trace_rays(
        field, rays, background, bool(options.render_with_direction), rays.shape[1], None, options.reference_queries
    )
    result = AttrDict(out)
    result.aux_losses = AttrDict()
    return result


def _params(renderer, params, batch_size: int):
    """`params`, or the renderer's stored meta weights repeated `batch_size` times when it is None."""
    if params is not None:
        return params
    shapes = renderer.nerstf.meta_parameter_shapes()
    return {
        f"nerstf.{key}": renderer.nerstf.get_buffer(key).expand(batch_size, *shape)
        for key, shape in shapes.items()
    }
