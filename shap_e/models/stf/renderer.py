"""Official module path `shap_e.models.stf.renderer`: STF rendering (SDF grid -> marching cubes ->
textured mesh -> shaded views) with AttrDict batches and outputs, an adapter over
`shap_e.rendering.stf`, which holds the one implementation.

The fields are given as the official callables: `sdf_fn` and `tf_fn` (`Model.forward_batched` of
an SDF and a texture model) or one `nerstf_fn` giving both (and a density). Views come from the
torch rasteriser, which shades ambient + diffuse light as the official ray-cast fallback does
(a specular term needs PyTorch3D's Phong shader, `options.rasterizer = "pytorch3d"`).
"""
import warnings
from abc import ABC, abstractmethod
from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from shap_e.models.nn.camera import DifferentiableProjectiveCamera
from shap_e.models.nn.meta import subdict
from shap_e.models.query import Query
from shap_e.models.ray_renderer import Renderer, get_camera_from_batch
from shap_e.models.stf.base import Model
from shap_e.rendering.fields import NeRSTFOutput
from shap_e.rendering.stf import extract_meshes, grid_points, render_mesh_views
from shap_e.rendering.volume import BoundingBox
from shap_e.util.collections import AttrDict

__all__ = [
    "STFRenderer",
    "STFRendererBase",
    "cross_entropy_sdf_loss",
    "render_views_from_stf",
    "slice_fields",
    "volume_query_points",
]

Shade = Union[float, Tuple[float, ...]]


class STFRendererBase(ABC):
    """A renderer with an SDF and a texture field."""

    @abstractmethod
    def get_signed_distance(self, query: Query, params: Optional[Dict], options: Optional[Dict]) -> torch.Tensor:
        """Signed distances `[batch, n_points, 1]` (positive inside) at `query.position`."""

    @abstractmethod
    def get_texture(self, query: Query, params: Optional[Dict], options: Optional[Dict]) -> torch.Tensor:
        """Texture channels `[batch, n_points, C]` at `query.position`."""


class STFRenderer(Renderer, STFRendererBase):
    """Renders an SDF model `sdf` and a texture model `tf` (e.g. `MLPSDFModel`,
    `MLPTextureFieldModel`; their params under `sdf.` and `tf.`) inside a bounding-box `volume`,
    sampled on a `grid_size^3` grid."""

    def __init__(
        self,
        sdf: Model,
        tf: Model,
        volume,
        grid_size: int,
        texture_channels: Sequence[str] = ("R", "G", "B"),
        channel_scale: Sequence[float] = (255.0, 255.0, 255.0),
        ambient_color: Shade = 0.3,
        diffuse_color: Shade = 0.7,
        specular_color: Shade = 0.0,
        output_srgb: bool = True,
        device: Optional[torch.device] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _box(volume)  # a bounding box, or a TypeError now
        self.sdf, self.tf, self.volume, self.grid_size = sdf, tf, volume, grid_size
        self.texture_channels = tuple(texture_channels)
        self.channel_scale = torch.as_tensor(channel_scale, dtype=torch.float32, device=device)
        self.ambient_color, self.diffuse_color, self.specular_color = ambient_color, diffuse_color, specular_color
        self.output_srgb = output_srgb
        self.to(device)

    def render_views(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """`render_views_from_stf` of this renderer's fields (see there for the batch and the output)."""
        params = self.update(params)
        return render_views_from_stf(
            batch, AttrDict(options or {}),
            sdf_fn=partial(self.sdf.forward_batched, params=subdict(params, "sdf")),
            tf_fn=partial(self.tf.forward_batched, params=subdict(params, "tf")), nerstf_fn=None,
            volume=self.volume, grid_size=self.grid_size, channel_scale=self.channel_scale,
            texture_channels=self.texture_channels, ambient_color=self.ambient_color,
            diffuse_color=self.diffuse_color, specular_color=self.specular_color, output_srgb=self.output_srgb,
            device=self.device,
        )

    def get_signed_distance(self, query: Query, params: Optional[Dict], options: Optional[Dict]) -> torch.Tensor:
        return self.sdf(query, params=subdict(params, "sdf"), options=options).signed_distance

    def get_texture(self, query: Query, params: Optional[Dict], options: Optional[Dict]) -> torch.Tensor:
        return self.tf(query, params=subdict(params, "tf"), options=options).channels


def render_views_from_stf(
    batch: Dict,
    options: AttrDict,
    *,
    sdf_fn: Optional[Callable],
    tf_fn: Optional[Callable],
    nerstf_fn: Optional[Callable],
    volume,
    grid_size: int,
    channel_scale: torch.Tensor,
    texture_channels: Sequence[str] = ("R", "G", "B"),
    ambient_color: Shade = 0.0,
    diffuse_color: Shade = 1.0,
    specular_color: Shade = 0.2,
    output_srgb: bool = False,
    device: torch.device = torch.device("cpu"),
) -> AttrDict:
    """Mesh the SDF on the volume's `grid_size^3` grid, colour the vertices with the texture, and
    render the batch's cameras (`batch.cameras`, or `pose` + `camera`).

    Queries go `batch.query_batch_size` points at a time (else `ray_batch_size`, `inner_batch_size`,
    4096). With `output_srgb` the texture is sRGB: vertex colours are converted to linear and the
    images back to sRGB. Returns an AttrDict: `channels [batch, *inner, H, W, C]` (x channel_scale),
    `transmittance`, `raw_meshes` (TorchMesh per batch element), `mesh_mask`, `fields` (the padded
    SDF grid), `raw_signed_distance [batch, G^3, 1]`, `raw_density` (with `nerstf_fn`), and
    `aux_losses.cross_entropy`.
    """
    batch, options = AttrDict(batch), AttrDict(options or {})
    distance_fn, texture_fn = sdf_fn or nerstf_fn, tf_fn or nerstf_fn
    if distance_fn is None or texture_fn is None:
        raise ValueError("pass sdf_fn and tf_fn, or nerstf_fn for both")
    camera, batch_size, inner_shape = get_camera_from_batch(batch)
    if not isinstance(camera, DifferentiableProjectiveCamera):
        raise TypeError(f"STF rendering needs projective cameras, got {type(camera).__name__}")
    chunk = int(batch.get("query_batch_size", batch.get("ray_batch_size", batch.get("inner_batch_size", 4096))))
    field = _field(distance_fn, texture_fn, with_density=sdf_fn is None, chunk=chunk,
                   options=None if nerstf_fn is distance_fn else options)
    grid, meshes, mesh_mask = extract_meshes(field, batch_size, grid_size, _box(volume).to(device), chunk, "exact",
                                             channels=tuple(texture_channels), srgb=output_srgb)
    if any(float(v) != 0 for v in torch.as_tensor(specular_color).reshape(-1)) and options.get("rasterizer") != "pytorch3d":
        warnings.warn("the torch rasteriser shades ambient + diffuse light only (as the official ray-cast fallback); "
                      "specular_color is ignored", stacklevel=2)
    views = render_mesh_views(
        meshes, mesh_mask, camera.projective((batch_size, *inner_shape)).to(device), options.get("rasterizer", "torch"),
        channels=tuple(texture_channels), ambient=ambient_color, diffuse=diffuse_color, srgb=output_srgb,
    )
    scale = torch.as_tensor(channel_scale, dtype=views.channels.dtype, device=views.channels.device).reshape(-1)
    channels = views.channels if bool((scale == 255).all()) else views.channels / 255 * scale
    out = AttrDict(channels=channels, transmittance=views.transmittance, raw_meshes=meshes, mesh_mask=mesh_mask,
                   fields=grid.fields, raw_signed_distance=grid.raw_signed_distance,
                   aux_losses=AttrDict(cross_entropy=cross_entropy_sdf_loss(grid.fields)))
    if grid.raw_density is not None:
        out.raw_density = grid.raw_density
    return out


def _field(distance_fn, texture_fn, with_density: bool, chunk: int, options: Optional[AttrDict]):
    """The official callables as a `shap_e.rendering.fields.FieldFn` (heads sdf, density_fine, color_stf)."""
    extra = {} if options is None else {"options": options}

    def field(position: torch.Tensor, direction: Optional[torch.Tensor], heads) -> NeRSTFOutput:
        query, out = Query(position=position, direction=direction), NeRSTFOutput()
        if "sdf" in heads or "density_fine" in heads:
            values = distance_fn(query=query, query_batch_size=chunk, **extra)
            out.sdf = values.signed_distance
            out.density_fine = values.get("density") if with_density else None
        if "color_stf" in heads:
            out.color_stf = texture_fn(query=query, query_batch_size=chunk, **extra).channels
        return out

    return field


def volume_query_points(volume, grid_size: int) -> torch.Tensor:
    """The `grid_size^3` grid over a bounding-box volume -> points `[G^3, 3]` (x slowest, z fastest).

    volume: anything with `bbox_min` and `bbox_max` `[3]` tensors (`BoundingBoxVolume`, `BoundingBox`).
    """
    box = _box(volume)
    index = torch.arange(grid_size**3, device=box.bbox_min.device)
    return grid_points(index, grid_size, box)


def slice_fields(fields: torch.Tensor, dim: int, start: int, end: int) -> torch.Tensor:
    """`fields [batch, X, Y, Z]` restricted to `start:end` along grid axis `dim` (1, 2 or 3)."""
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be a grid axis (1, 2 or 3), got {dim}")
    index: List[slice] = [slice(None)] * fields.ndim
    index[dim] = slice(start, end)
    return fields[tuple(index)]


def cross_entropy_sdf_loss(fields: torch.Tensor) -> torch.Tensor:
    """The official STF sign-consistency loss of `fields [batch, X, Y, Z]` (a scalar).

    For every grid axis and both neighbour directions: binary cross-entropy (with logits) of each
    sample's neighbour sign `(field > 0)` given `logsigmoid(field)` as the logits (the official
    code applies the sigmoid twice; this is what its `aux_losses.cross_entropy` reports), averaged
    over samples; the six terms are summed.
    """
    logits = F.logsigmoid(fields)
    signs = (fields > 0).float()
    losses = []
    for dim in range(1, 4):
        n = fields.shape[dim]
        for target_start, target_end, pred_start, pred_end in ((0, n - 1, 1, n), (1, n, 0, n - 1)):
            targets = slice_fields(signs, dim, target_start, target_end)
            preds = slice_fields(logits, dim, pred_start, pred_end)
            losses.append(F.binary_cross_entropy_with_logits(preds, targets, reduction="none").flatten(1).mean())
    return torch.stack(losses, dim=-1).sum()


def _box(volume) -> BoundingBox:
    """The typed box of a bounding-box volume (anything with bbox_min/bbox_max; min_dist and
    min_t_range where it has them)."""
    if isinstance(volume, BoundingBox):
        return volume
    if not hasattr(volume, "bbox_min") or not hasattr(volume, "bbox_max"):
        raise TypeError(f"volume must be a BoundingBoxVolume, got {type(volume).__name__}")
    return BoundingBox(
        bbox_min=torch.as_tensor(volume.bbox_min, dtype=torch.float32),
        bbox_max=torch.as_tensor(volume.bbox_max, dtype=torch.float32),
        min_dist=float(getattr(volume, "min_dist", 0.0)),
        min_t_range=float(getattr(volume, "min_t_range", 1e-3)),
    )
