"""STF decoding: SDF grid -> marching-cubes mesh -> vertex colours -> shaded views (docs/behaviour.md#stf-meshes).

Pure functions; the field is any `FieldFn` (`shap_e.rendering.fields`), batched like the params.
"""
import importlib.util
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch

from shap_e.rendering.cameras import ProjectiveCamera
from shap_e.rendering.color import linear_to_srgb, srgb_to_linear
from shap_e.rendering.marching_cubes import marching_cubes
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.rendering.fields import FieldFn
from shap_e.rendering.rasterize import STF_LIGHT_DIRECTION, rasterize, shade_vertex_colors
from shap_e.rendering.sdf_band import BandStats, evaluate_band
from shap_e.rendering.volume import BoundingBox

__all__ = [
    "SDFGrid",
    "MeshViews",
    "RASTERIZERS",
    "grid_points",
    "query_sdf_grid",
    "query_sdf_band",
    "meshes_from_fields",
    "check_vertex_placement",
    "VERTEX_PLACEMENTS",
    "color_meshes",
    "extract_meshes",
    "MESH_MODES",
    "render_mesh_views",
    "check_rasterizer",
]

RASTERIZERS = ("torch", "pytorch3d")
# "fast": narrow-band SDF grid, same mesh as "exact" on smooth fields (shap_e.rendering.sdf_band);
# "exact": every grid sample queried, as the reference.
MESH_MODES = ("fast", "exact")
RGB = ("R", "G", "B")
VERTEX_PLACEMENTS = ("reference", "sampled")
_GEMM_ROWS = 64
Shade = Union[float, Sequence[float]]  # one light intensity, or one per colour channel
_NO_PYTORCH3D = (
    "rasterizer='pytorch3d' needs PyTorch3D, which is not importable (pip has no wheel for most "
    "platforms; build it from source), or use rasterizer='torch'"
)


@dataclass
class SDFGrid:
    """The field sampled on the `G^3` grid (flat index: x slowest, z fastest).

    fields: `[batch, G + 2, G + 2, G + 2]` SDF with a border of -1 (outside) all around.
    raw_signed_distance, raw_density: `[batch, G^3, 1]` (SDF head, fine density head).
    A narrow-band grid (`query_sdf_band`) holds +-1 away from the surface, has no density
    (None) and says in `band` how much it evaluated.
    """

    fields: torch.Tensor
    raw_signed_distance: torch.Tensor
    raw_density: Optional[torch.Tensor]
    band: Optional[BandStats] = None


@dataclass
class MeshViews:
    """Shaded renders of meshes: channels `[batch, *inner, H, W, 3]` in 0..255, transmittance `[..., 1]`."""

    channels: torch.Tensor
    transmittance: torch.Tensor


def grid_points(index: torch.Tensor, grid_size: int, box: BoundingBox) -> torch.Tensor:
    """World positions `[n, 3]` of flat grid indices `index [n]` (x = i div G^2, y, z = i mod G)."""
    xs = torch.div(index, grid_size**2, rounding_mode="floor") % grid_size
    ys = torch.div(index, grid_size, rounding_mode="floor") % grid_size
    zs = index % grid_size
    cells = torch.stack([xs, ys, zs], dim=1).float()
    return cells / (grid_size - 1) * box.size.to(cells) + box.bbox_min.to(cells)


def query_sdf_grid(field: FieldFn, batch_size: int, grid_size: int, box: BoundingBox, chunk: int, device) -> SDFGrid:
    """Evaluate SDF and density on the grid, `chunk` points per call (bounds peak memory).

    A field without a density head (it returns None for it) gives `raw_density` None.
    """
    n = grid_size**3
    sdf = torch.empty(batch_size, n, 1, device=device)
    density = torch.empty(batch_size, n, 1, device=device)
    for start in range(0, n, chunk):
        index = torch.arange(start, min(start + chunk, n), device=device)
        points = grid_points(index, grid_size, box).unsqueeze(0).expand(batch_size, -1, -1)
        out = field(points, None, ("sdf", "density_fine"))
        sdf[:, start:start + len(index)] = out.sdf
        if out.density_fine is None:
            density = None
        else:
            density[:, start:start + len(index)] = out.density_fine
    cube = sdf.view(batch_size, grid_size, grid_size, grid_size)
    fields = torch.nn.functional.pad(cube, (1, 1, 1, 1, 1, 1), value=-1.0)
    return SDFGrid(fields=fields, raw_signed_distance=sdf, raw_density=density)


def query_sdf_band(
    field: FieldFn, batch_size: int, grid_size: int, box: BoundingBox, chunk: int, device, **band_options
) -> SDFGrid:
    """The SDF grid exact only near the surface (`shap_e.rendering.sdf_band`); same mesh, far fewer queries.

    band_options: `coarse_step`, `margin`, `dilation`, `max_fraction` of `evaluate_band`. Where the
    band would cover most of the grid, this is `query_sdf_grid` (after the coarse pass).
    """

    def sample(index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(batch_size, len(index), device=device)
        for start in range(0, len(index), chunk):
            part = index[start:start + chunk]
            # GEMM kernels round the rows of a ragged last block differently; padding every query
            # to whole blocks keeps each value bit-identical to the full grid's (whose chunks are
            # whole blocks when `chunk` and G^3 are multiples of 64, e.g. 4096 and G = 128).
            padded = torch.cat([part, part[-1:].expand((-len(part)) % _GEMM_ROWS)])
            points = grid_points(padded, grid_size, box).unsqueeze(0).expand(batch_size, -1, -1)
            out[:, start:start + len(part)] = field(points, None, ("sdf",)).sdf[:, : len(part), 0]
        return out

    cube, stats = evaluate_band(sample, batch_size, grid_size, device, **band_options)
    if cube is None:
        grid = query_sdf_grid(field, batch_size, grid_size, box, chunk, device)
        grid.band = BandStats(evaluated=stats.evaluated + stats.total, total=stats.total, rounds=0)
        return grid
    fields = torch.nn.functional.pad(cube, (1, 1, 1, 1, 1, 1), value=-1.0)
    return SDFGrid(fields=fields, raw_signed_distance=cube.reshape(batch_size, -1, 1), raw_density=None, band=stats)


def meshes_from_fields(
    fields: torch.Tensor, box: BoundingBox, vertex_placement: str = "reference"
) -> Tuple[List[TorchMesh], torch.Tensor]:
    """Marching cubes on each padded `[G + 2]^3` field.

    vertex_placement: "reference" stretches the padded grid over the whole box, so grid sample j
        lands at `min + (j + 1) / (G + 1) * size` rather than where it was sampled (`min + j /
        (G - 1) * size`): the mesh shrinks by a factor (G - 1) / (G + 1) about the box centre
        (3 % at G = 64, 1.6 % at G = 128). The reference does this, and the golden meshes match it.
        "sampled" puts every vertex where its field values were sampled: the true surface.
    Returns the meshes and `mesh_mask [batch]` (False where there was no surface: then the mesh
    is the reference's placeholder of 3 vertices at `field.mean()` and one face).
    """
    check_vertex_placement(vertex_placement)
    min_point, size = box.bbox_min, box.size
    if vertex_placement == "sampled":
        step = box.size / (fields.shape[-1] - 3)  # sample spacing of the unpadded G^3 grid
        min_point, size = box.bbox_min - step, box.size + 2 * step
    meshes, mask = [], []
    for field in fields:
        mesh = marching_cubes(field, min_point, size)
        mask.append(mesh.faces.shape[0] > 0)
        if not mask[-1]:
            verts = torch.zeros(3, 3, dtype=field.dtype, device=field.device) + field.mean()
            faces = torch.tensor([[0, 1, 2]], dtype=torch.long, device=field.device)
            mesh = TorchMesh(verts=verts, faces=faces)
        meshes.append(mesh)
    return meshes, torch.tensor(mask, dtype=torch.bool, device=fields.device)


def check_vertex_placement(vertex_placement: str) -> None:
    if vertex_placement not in VERTEX_PLACEMENTS:
        raise ValueError(f"vertex_placement must be one of {VERTEX_PLACEMENTS}, got {vertex_placement!r}")


def color_meshes(
    field: FieldFn, meshes: List[TorchMesh], chunk: int, channels: Sequence[str] = RGB, srgb: bool = True
) -> List[TorchMesh]:
    """Add vertex channels named `channels` from the STF colour head (`[..., len(channels)]`),
    converted sRGB -> linear when `srgb` (the release's field is sRGB)."""
    n_max = max(len(m.verts) for m in meshes)
    device = meshes[0].verts.device
    # Pad every mesh to the same vertex count so that one batched query serves all of them.
    points = torch.zeros(len(meshes), n_max, 3, device=device)
    for b, mesh in enumerate(meshes):
        points[b, : len(mesh.verts)] = mesh.verts
    colors = torch.empty(len(meshes), n_max, len(channels), device=device)
    for start in range(0, n_max, chunk):
        colors[:, start:start + chunk] = field(points[:, start:start + chunk], None, ("color_stf",)).color_stf
    if srgb:
        colors = srgb_to_linear(colors)
    return [
        TorchMesh(
            verts=mesh.verts,
            faces=mesh.faces,
            vertex_channels={c: colors[b, : len(mesh.verts), i] for i, c in enumerate(channels)},
        )
        for b, mesh in enumerate(meshes)
    ]


def extract_meshes(
    field: FieldFn,
    batch_size: int,
    grid_size: int,
    box: BoundingBox,
    chunk: int,
    mesh_mode: str = "exact",
    vertex_placement: str = "reference",
    channels: Sequence[str] = RGB,
    srgb: bool = True,
) -> Tuple[SDFGrid, List[TorchMesh], torch.Tensor]:
    """SDF grid -> marching cubes -> coloured meshes (docs/behaviour.md#stf-meshes), `chunk` points per query.

    mesh_mode: "exact" samples the whole grid; "fast" only a band around the surface (same mesh;
    the whole grid after all where a batch element has no surface, whose placeholder mesh sits
    at the mean of the whole field). Returns the grid, the meshes and `mesh_mask [batch]`.
    """
    if mesh_mode not in MESH_MODES:
        raise ValueError(f"mesh_mode must be one of {MESH_MODES}, got {mesh_mode!r}")
    device = box.bbox_min.device
    args = (field, batch_size, grid_size, box, chunk, device)
    grid = query_sdf_band(*args) if mesh_mode == "fast" else query_sdf_grid(*args)
    meshes, mesh_mask = meshes_from_fields(grid.fields, box, vertex_placement)
    if mesh_mode == "fast" and not bool(mesh_mask.all()):
        grid = query_sdf_grid(*args)
        meshes, mesh_mask = meshes_from_fields(grid.fields, box, vertex_placement)
    return grid, color_meshes(field, meshes, chunk, channels, srgb), mesh_mask


def render_mesh_views(
    meshes: List[TorchMesh],
    mesh_mask: torch.Tensor,
    cameras: ProjectiveCamera,
    rasterizer: str = "torch",
    channels: Sequence[str] = RGB,
    ambient: Shade = 0.3,
    diffuse: Shade = 0.7,
    srgb: bool = True,
) -> MeshViews:
    """Shade mesh `b` in the views `cameras[b]` (cameras.shape = `(batch, *inner)`).

    colour = vertex colour x (ambient + diffuse |n . l|) (two-sided light; a float or one value
    per channel), converted linear -> sRGB when `srgb`, then `channels = colour * alpha * 255`.
    Meshes with `mesh_mask` False render empty.
    """
    check_rasterizer(rasterizer)
    batch, *inner = cameras.shape
    if batch != len(meshes):
        raise ValueError(f"cameras.shape[0] = {batch} must equal the number of meshes ({len(meshes)})")
    per_mesh = math.prod(inner)
    colors, alphas = [], []
    for b, mesh in enumerate(meshes):
        views = _camera_slice(cameras, b * per_mesh, (b + 1) * per_mesh)
        rgb = torch.stack([mesh.vertex_channels[c] for c in channels], dim=-1)
        if rasterizer == "torch":
            fragments = rasterize(mesh.verts, mesh.faces, views)
            color, alpha = shade_vertex_colors(fragments, mesh.verts, mesh.faces, rgb, ambient=ambient, diffuse=diffuse)
        else:
            color, alpha = _render_pytorch3d(mesh.verts, mesh.faces, rgb, views, ambient, diffuse)
        alpha = alpha * mesh_mask[b].to(alpha)
        colors.append(linear_to_srgb(color) if srgb else color)
        alphas.append(alpha[..., None])
    color, alpha = torch.stack(colors), torch.stack(alphas)
    shape = (batch, *inner, cameras.height, cameras.width)
    return MeshViews(
        channels=(color * alpha * 255).reshape(*shape, len(channels)),
        transmittance=(1 - alpha).reshape(*shape, 1),
    )


def check_rasterizer(rasterizer: str) -> None:
    """Raise a ValueError unless `rasterizer` is a known backend that can be used here."""
    if rasterizer not in RASTERIZERS:
        raise ValueError(f"rasterizer must be one of {RASTERIZERS}, got {rasterizer!r}")
    if rasterizer == "pytorch3d" and importlib.util.find_spec("pytorch3d") is None:
        raise ValueError(_NO_PYTORCH3D)


def _camera_slice(cameras: ProjectiveCamera, start: int, stop: int) -> ProjectiveCamera:
    return ProjectiveCamera(
        origin=cameras.origin[start:stop], x=cameras.x[start:stop], y=cameras.y[start:stop],
        z=cameras.z[start:stop], width=cameras.width, height=cameras.height,
        x_fov=cameras.x_fov, y_fov=cameras.y_fov,
    )


def _render_pytorch3d(
    verts, faces, rgb, cameras: ProjectiveCamera, ambient: Shade = 0.3, diffuse: Shade = 0.7
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The reference's GPU path (docs/behaviour.md#vertex-colours-and-shading): PyTorch3D soft Phong
    shading, hard in practice.

    Returns linear `rgb [N, H, W, 3]` and `alpha [N, H, W]`.
    """
    try:
        from pytorch3d import renderer as p3r
        from pytorch3d.structures import Meshes
    except ImportError as e:
        raise ValueError(_NO_PYTORCH3D) from e

    class TwoSidedLights(p3r.DirectionalLights):
        """Lights both faces of every triangle, like the reference."""

        def diffuse(self, normals, points=None):
            return torch.maximum(super().diffuse(normals, points), super().diffuse(-normals, points))

        def specular(self, normals, points, camera_position, shininess):
            front = super().specular(normals, points, camera_position, shininess)
            return torch.maximum(front, super().specular(-normals, points, camera_position, shininess))

    n, device = cameras.origin.shape[0], verts.device
    frame = torch.stack([-cameras.x, -cameras.y, cameras.z], dim=1)  # rows -x, -y, z: R^T
    translation = -torch.einsum("nij,nj->ni", frame, cameras.origin)
    p3_cameras = p3r.FoVPerspectiveCameras(
        R=frame.transpose(1, 2), T=translation, fov=cameras.x_fov, degrees=False, device=device
    )
    settings = p3r.RasterizationSettings(
        image_size=cameras.width, blur_radius=math.log(1.0 / 1e-4 - 1.0) * 1e-5, faces_per_pixel=50,
        max_faces_per_bin=100_000, perspective_correct=False,
    )
    lights = TwoSidedLights(
        ambient_color=(_rgb(ambient),), diffuse_color=(_rgb(diffuse),), specular_color=((0.0,) * 3,),
        direction=(STF_LIGHT_DIRECTION,), device=device,
    )
    shader = p3r.SoftPhongShader(
        device=device, cameras=p3_cameras, lights=lights,
        blend_params=p3r.BlendParams(sigma=1e-5, gamma=1e-4, background_color=(0.0, 0.0, 0.0)),
    )
    renderer = p3r.MeshRenderer(p3r.MeshRasterizer(cameras=p3_cameras, raster_settings=settings), shader)
    meshes = Meshes(verts=[verts] * n, faces=[faces] * n, textures=p3r.TexturesVertex([rgb] * n))
    images = renderer(meshes)
    return images[..., :3], images[..., 3]


def _rgb(value: Shade) -> Tuple[float, ...]:
    return (float(value),) * 3 if isinstance(value, (int, float)) else tuple(float(v) for v in value)
