"""`NeRSTFRenderer`: renders a latent-parameterised NeRSTF field as NeRF views or STF meshes
(docs/behaviour.md#renderer).

The module holds only the checkpoint state (`nerstf.mlp.*`, `void.background`); the ray marching,
mesh extraction and shading are the pure functions of `shap_e.rendering.{nerf, stf}`. The typed
entry points are `render_cameras`, `extract_mesh` and `field`; the official AttrDict methods
`render_views(batch, params, options)` and `render_rays` are adapters over them
(`shap_e.models.nerstf.official`).
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

import torch
from tqdm.auto import tqdm

from shap_e.util.collections import AttrDict
from shap_e.util.config import check_keys
from shap_e.models.nerstf import official
from shap_e.models.nerf.model import VoidNeRFModel
from shap_e.models.nerstf.mlp import NeRSTFMLP
from shap_e.models.ray_renderer import RayRenderer
from shap_e.rendering.cameras import ProjectiveCamera
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.rendering.fields import FieldFn, NeRSTFOutput
from shap_e.rendering.nerf import render_rays, z_depth
from shap_e.rendering.stf import MESH_MODES, check_rasterizer, check_vertex_placement, extract_meshes, render_mesh_views
from shap_e.rendering.volume import BoundingBox

__all__ = ["RenderOutput", "VoidBackground", "NeRSTFRenderer", "build_renderer"]

RENDERING_MODES = ("stf", "nerf")
MIN_GRID_SIZE = 8
CHANNEL_SCALE = 255.0
# Field points per MLP call in NeRF mode: [points, d_hidden] activations of 8 MiB stay in cache;
# at 65536 points (64 MiB) one core ran the MLP ~1.5x slower.
NERF_QUERY_BATCH_SIZE = 8192


@dataclass
class RenderOutput:
    """What `render_cameras` returns; fields a mode does not produce are None.

    Both modes: channels `[batch, *inner, H, W, 3]` in 0..255, transmittance `[..., H, W, 1]`.
    NeRF: depth (camera z-depth), distances, t0, t1, intersected, channels_coarse,
    transmittance_coarse, distances_coarse `[..., H, W, 1 or 3]`; raw_signed_distance and
    raw_density `[..., H, W, n_coarse + n_fine]` (fine pass).
    STF: meshes (one per batch element, linear vertex colours), mesh_mask `[batch]`, fields
    `[batch, G + 2, G + 2, G + 2]`, raw_signed_distance and raw_density `[batch, G^3, 1]` (with
    `mesh_mode="fast"`: fields exact only near the surface, +-1 elsewhere; raw_density None).
    """

    channels: torch.Tensor
    transmittance: torch.Tensor
    depth: Optional[torch.Tensor] = None
    distances: Optional[torch.Tensor] = None
    t0: Optional[torch.Tensor] = None
    t1: Optional[torch.Tensor] = None
    intersected: Optional[torch.Tensor] = None
    channels_coarse: Optional[torch.Tensor] = None
    transmittance_coarse: Optional[torch.Tensor] = None
    distances_coarse: Optional[torch.Tensor] = None
    raw_signed_distance: Optional[torch.Tensor] = None
    raw_density: Optional[torch.Tensor] = None
    meshes: Optional[List[TorchMesh]] = None
    mesh_mask: Optional[torch.Tensor] = None
    fields: Optional[torch.Tensor] = None


class VoidBackground(VoidNeRFModel):
    """The colour seen where rays leave the volume: a `VoidNeRFModel` given a `[3]` colour in [0, 1]."""

    def __init__(self, background: torch.Tensor):
        super().__init__(background, channel_scale=1.0, device=background.device)


class NeRSTFRenderer(RayRenderer):
    """Renders the field `nerstf` (weights from the latent) inside `box` over the `void` background."""

    def __init__(
        self,
        nerstf: NeRSTFMLP,
        background: torch.Tensor,
        box: BoundingBox,
        grid_size: int = 128,
        n_coarse_samples: int = 64,
        n_fine_samples: int = 128,
    ):
        super().__init__()
        _check_grid_size(grid_size)
        self.nerstf = nerstf
        self.void = VoidBackground(background)
        self.box = box
        self.grid_size = grid_size
        self.n_coarse_samples = n_coarse_samples
        self.n_fine_samples = n_fine_samples

    def render_views(
        self, batch: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None, options: Optional[Mapping] = None
    ) -> AttrDict:
        """The official entry point: render `batch.cameras` with `options.rendering_mode` ("stf",
        default, or "nerf") -> AttrDict with `channels [batch, *inner, H, W, 3]` (0..255),
        `transmittance`, and `raw_meshes` (STF) or the NeRF fields of `render_cameras`.
        See `shap_e.models.nerstf.official.render_views` for the batch keys and options."""
        return official.render_views(self, batch, params, options)

    def render_rays(
        self, batch: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None, options: Optional[Mapping] = None
    ) -> AttrDict:
        """The official NeRF pass over `batch.rays [batch, n_rays, 2, 3]` -> per-ray AttrDict
        (`shap_e.models.nerstf.official.render_rays`)."""
        return official.render_rays(self, batch, params, options)

    def render_cameras(
        self,
        cameras: ProjectiveCamera,
        params: Mapping[str, torch.Tensor],
        rendering_mode: str = "stf",
        render_with_direction: bool = False,
        ray_batch_size: int = 4096,
        generator: Optional[torch.Generator] = None,
        query_batch_size: Optional[int] = None,
        rasterizer: str = "torch",
        mesh_mode: str = "fast",
        reference_queries: bool = False,
        query_dtype: Optional[torch.dtype] = None,
        render_background: bool = True,
    ) -> RenderOutput:
        """Render `cameras` (shape `(batch, *inner)`) of the fields given by `params`.

        params: `{"nerstf.mlp.{i}.weight": [batch, d_out, d_in]}` from `bottleneck_to_params`.
        NeRF mode ray-marches in chunks of `ray_batch_size` rays (stochastic: `generator`, or the
        global RNG as the reference), evaluating the field `query_batch_size` points at a time
        (default 8192; it bounds peak memory and moves results by at most ~1e-6, through GEMM
        blocking); `reference_queries` as in `shap_e.rendering.nerf.render_rays` (True replays
        the reference's queries exactly). STF mode extracts meshes on the `grid_size` grid (field
        queries in chunks of `query_batch_size`, default `ray_batch_size`, as the reference) and
        rasterises them;
        `mesh_mode` as in `extract_mesh` (with "fast", `fields` and `raw_signed_distance` are
        exact only near the surface and `raw_density` is None). `query_dtype` as in `extract_mesh`.
        `render_background=False` composites NeRF views over black instead of the void colour.
        """
        if rendering_mode not in RENDERING_MODES:
            raise ValueError(f"rendering_mode must be one of {RENDERING_MODES}, got {rendering_mode!r}")
        if ray_batch_size < 1:
            raise ValueError(f"ray_batch_size must be positive, got {ray_batch_size}")
        mlp_params = self.mlp_params(params, cameras.shape[0])
        if rendering_mode == "nerf":
            field = self._field(mlp_params, query_batch_size or NERF_QUERY_BATCH_SIZE, query_dtype)
            background = self.void.background if render_background else torch.zeros_like(self.void.background)
            return self._render_nerf(
                cameras, field, background, render_with_direction, ray_batch_size, generator, reference_queries
            )
        if render_with_direction:
            raise ValueError("render_with_direction is only meaningful with rendering_mode='nerf'")
        check_rasterizer(rasterizer)
        _check_mesh_mode(mesh_mode)
        grid, meshes, mesh_mask = self._extract(
            mlp_params, self.grid_size, query_batch_size or ray_batch_size, mesh_mode, query_dtype
        )
        views = render_mesh_views(meshes, mesh_mask, cameras.to(grid.fields.device), rasterizer)
        return RenderOutput(
            channels=views.channels, transmittance=views.transmittance, meshes=meshes, mesh_mask=mesh_mask,
            fields=grid.fields, raw_signed_distance=grid.raw_signed_distance, raw_density=grid.raw_density,
        )

    def extract_mesh(
        self,
        params: Mapping[str, torch.Tensor],
        grid_size: Optional[int] = None,
        query_batch_size: int = 4096,
        mesh_mode: str = "fast",
        query_dtype: Optional[torch.dtype] = None,
        vertex_placement: str = "reference",
        progress: bool = False,
    ) -> List[TorchMesh]:
        """One mesh per batch element of `params`, with linear `R, G, B` vertex colours
        (docs/behaviour.md#vertex-colours-and-shading).

        mesh_mode: "fast" (default) queries the SDF only in a narrow band around the surface found
            on a 4x coarser grid, which gives the exact mode's mesh bit for bit on smooth fields
            (guarantee in `shap_e.rendering.sdf_band`); "exact" queries every grid sample.
        query_dtype: None (float32, default) or `torch.bfloat16` to autocast the MLP queries:
            ~1.8x faster on CPUs with AVX512-BF16; vertices move by up to ~1e-3 of the box
            and faces can differ where the surface grazes a sample (bench/decode.py measures it).
        vertex_placement: "reference" (default) places vertices as the release does, on the padded
            grid stretched over the box (the mesh shrinks by (G - 1) / (G + 1)); "sampled" places
            them where the field was sampled, the true zero level set
            (`shap_e.rendering.stf.meshes_from_fields`).
        progress: count the field queries on a tqdm bar on stderr (for large grids).
        """
        grid_size = self.grid_size if grid_size is None else grid_size
        _check_grid_size(grid_size)
        _check_mesh_mode(mesh_mode)
        check_vertex_placement(vertex_placement)
        with tqdm(desc=f"decoding (grid {grid_size})", unit=" points", unit_scale=True, disable=not progress) as bar:
            return self._extract(
                self.mlp_params(params), grid_size, query_batch_size, mesh_mode, query_dtype, vertex_placement, bar
            )[1]

    def field(
        self,
        params: Mapping[str, torch.Tensor],
        query_batch_size: int = 4096,
        query_dtype: Optional[torch.dtype] = None,
    ) -> FieldFn:
        """The field of `params` (from `bottleneck_to_params`) as a `shap_e.rendering.fields.FieldFn`."""
        return self._field(self.mlp_params(params), query_batch_size, query_dtype)

    def _field(self, mlp_params: Dict[str, torch.Tensor], chunk: int, dtype: Optional[torch.dtype] = None,
               bar: Optional[tqdm] = None):
        """The field as a `FieldFn`, evaluated at most `chunk` points per batch element at a time.

        dtype: None (float32) or a float type to autocast the MLP to (heads come back as float32).
        bar: a progress bar advanced by the number of points of each query.
        """
        if chunk < 1:
            raise ValueError(f"query_batch_size must be positive, got {chunk}")

        def query(position, direction, heads) -> NeRSTFOutput:
            if dtype is None:
                return self.nerstf.query(position, mlp_params, direction, heads)
            with torch.autocast(position.device.type, dtype=dtype):
                out = self.nerstf.query(position, mlp_params, direction, heads)
            return NeRSTFOutput(**{h: getattr(out, h).float() for h in heads})

        def field(position, direction, heads) -> NeRSTFOutput:
            parts = []
            for start in range(0, position.shape[1], chunk):
                part = None if direction is None else direction[:, start:start + chunk]
                parts.append(query(position[:, start:start + chunk], part, heads))
                if bar is not None:
                    bar.update(position[:, start:start + chunk].shape[:2].numel())
            if len(parts) == 1:
                return parts[0]
            return NeRSTFOutput(**{h: torch.cat([getattr(p, h) for p in parts], dim=1) for h in heads})

        return field

    def _extract(self, mlp_params, grid_size: int, chunk: int, mesh_mode: str, dtype=None, placement="reference",
                 bar: Optional[tqdm] = None):
        field = self._field(mlp_params, chunk, dtype, bar)
        weight = next(iter(mlp_params.values()))
        return extract_meshes(field, weight.shape[0], grid_size, self.box.to(weight.device), chunk, mesh_mode, placement)

    def _render_nerf(self, cameras, field, background, with_direction, ray_batch_size, generator, reference):
        batch, *inner = cameras.shape
        device = self.void.background.device
        rays = cameras.to(device).rays()  # [batch * views, H * W, 2, 3]
        pixels = rays.shape[1]
        rays = rays.reshape(batch, -1, 2, 3)
        out = self.trace_rays(field, rays, background, with_direction, ray_batch_size, generator, reference)
        out["depth"] = z_depth(out["distances"], rays, cameras.z, pixels)
        shape = (batch, *inner, cameras.height, cameras.width)
        return RenderOutput(**{k: v.reshape(*shape, v.shape[-1]) for k, v in out.items()})

    def trace_rays(
        self, field, rays, background, with_direction, ray_batch_size, generator=None, reference=False
    ) -> Dict[str, torch.Tensor]:
        """NeRF outputs of `rays [batch, n_rays, 2, 3]`, `ray_batch_size` rays at a time (the fields
        of `shap_e.rendering.nerf.RayRender`, colours scaled to 0..255)."""
        box = self.box.to(rays.device)
        parts = [
            render_rays(
                field, rays[:, start:start + ray_batch_size], box, background,
                self.n_coarse_samples, self.n_fine_samples, with_direction, generator, reference,
            )
            for start in range(0, rays.shape[1], ray_batch_size)
        ]
        out = {name: torch.cat([getattr(p, name) for p in parts], dim=1) for name in vars(parts[0])}
        for name in ("channels", "channels_coarse"):
            out[name] = out[name] * CHANNEL_SCALE
        return out

    def mlp_params(self, params: Mapping[str, torch.Tensor], batch: Optional[int] = None) -> Dict[str, torch.Tensor]:
        """The MLP weights in `params` (from `bottleneck_to_params`) keyed as `self.nerstf.query` takes
        them: the `nerstf.` prefix stripped, shapes checked against the meta layers. batch: the
        expected leading size (default: that of `params`)."""
        if batch is None:
            batch = next(iter(params.values())).shape[0] if params else 1
        expected = self.nerstf.meta_parameter_shapes()
        missing = [f"nerstf.{k}" for k in expected if f"nerstf.{k}" not in params]
        if missing:
            raise ValueError(f"params lacks {missing}; pass the dict returned by bottleneck_to_params")
        out = {}
        for key, shape in expected.items():
            value = params[f"nerstf.{key}"]
            if tuple(value.shape) != (batch, *shape):
                raise ValueError(
                    f"params['nerstf.{key}'] has shape {tuple(value.shape)}, expected {(batch, *shape)} "
                    "(batch size must match cameras.shape[0])"
                )
            out[key] = value
        return out


def _check_mesh_mode(mesh_mode: str) -> None:
    if mesh_mode not in MESH_MODES:
        raise ValueError(f"mesh_mode must be one of {MESH_MODES}, got {mesh_mode!r}")


def _check_grid_size(grid_size: int) -> None:
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < MIN_GRID_SIZE:
        raise ValueError(f"grid_size must be an int >= {MIN_GRID_SIZE}, got {grid_size!r}")


_NERSTF_FIXED = {
    "name": "MLPNeRSTFModel", "activation": "swish", "density_activation": "relu", "meta_bias": False,
    "meta_parameters": True, "posenc_version": "nerf", "separate_coarse_channels": True,
    "separate_nerf_channels": True, "trainable_meta": False,
}
_NERSTF_SIZES = ("d_hidden", "n_hidden_layers", "n_meta_layers", "insert_direction_at", "init_scale",
                 "initial_density_bias", "position_degrees")


def build_renderer(config: Mapping[str, Any], device: Optional[torch.device] = None) -> NeRSTFRenderer:
    """A `NeRSTFRenderer` from the `renderer:` block of a transmitter/decoder YAML config."""
    check_keys(config, {"name", "grid_size", "n_coarse_samples", "n_fine_samples", "separate_shared_samples",
                        "nerstf", "void", "volume"}, "renderer")
    _check_fixed(config, {"name": "NeRSTFRenderer", "separate_shared_samples": True}, "renderer")
    nerstf_config = dict(config.get("nerstf", {}))
    check_keys(nerstf_config, set(_NERSTF_FIXED) | set(_NERSTF_SIZES), "renderer.nerstf")
    _check_fixed(nerstf_config, _NERSTF_FIXED, "renderer.nerstf")
    nerstf = NeRSTFMLP(**{k: nerstf_config[k] for k in _NERSTF_SIZES if k in nerstf_config}, device=device)
    void_config = dict(config.get("void", {}))
    check_keys(void_config, {"name", "background"}, "renderer.void")
    _check_fixed(void_config, {"name": "VoidNeRFModel"}, "renderer.void")
    background = torch.tensor(void_config.get("background", (0.0, 0.0, 0.0)), dtype=torch.float32, device=device)
    if background.shape != (3,):
        raise ValueError(f"renderer.void.background must be 3 numbers in 0..255, got {void_config['background']}")
    volume = dict(config.get("volume", {}))
    check_keys(volume, {"name", "bbox_min", "bbox_max", "min_dist", "min_t_range"}, "renderer.volume")
    _check_fixed(volume, {"name": "BoundingBoxVolume"}, "renderer.volume")
    box = BoundingBox(
        bbox_min=torch.tensor(volume.get("bbox_min", (-1.0,) * 3), dtype=torch.float32),
        bbox_max=torch.tensor(volume.get("bbox_max", (1.0,) * 3), dtype=torch.float32),
        min_dist=float(volume.get("min_dist", 0.0)),
        min_t_range=float(volume.get("min_t_range", 1e-3)),
    )
    if not bool((box.bbox_max > box.bbox_min).all()):
        raise ValueError(f"renderer.volume needs bbox_max > bbox_min, got {volume}")
    return NeRSTFRenderer(
        nerstf, background / 255.0, box,
        grid_size=config.get("grid_size", 128), n_coarse_samples=config.get("n_coarse_samples", 64),
        n_fine_samples=config.get("n_fine_samples", 128),
    )


def _check_fixed(config: Mapping[str, Any], fixed: Mapping[str, Any], where: str) -> None:
    """Options whose other values the release never uses are accepted only at their release value."""
    for key, value in fixed.items():
        if key in config and config[key] != value:
            raise ValueError(f"{where}.{key} = {config[key]!r} is not supported; only {value!r} is")
