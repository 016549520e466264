"""Decode a latent with a Transmitter or ChannelsDecoder: images from cameras, a mesh, a texture field.

`xm` is anything with `.bottleneck_to_params(latent [1, d])` and a `.renderer`
(`shap_e.models.nerstf.renderer.NeRSTFRenderer`). `shap_e.util.notebooks` re-exports these functions under
their official names. Cameras are typed `ProjectiveCamera`s or the official
`DifferentiableCameraBatch` (what the official `create_pan_cameras` returns).
"""
import math
from typing import Any, List, Optional, Union

import torch
from PIL import Image

from shap_e.models.nn.camera import DifferentiableCameraBatch, as_projective
from shap_e.rendering.cameras import ProjectiveCamera, turntable_cameras
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.util.checks import check_int
from shap_e.util.errors import InvalidArgumentError
from shap_e.util.memory import check_fits
from shap_e.util.precision import resolve_query_dtype
from shap_e.util.tensor_files import as_float_latent

__all__ = [
    "MAX_GRID_SIZE", "check_mesh_memory", "check_render_memory", "check_render_mode_of", "check_rendering_mode",
    "decode_latent_images", "decode_latent_mesh", "latent_color_fn", "load_decoder", "mesh_memory_bytes",
    "render_memory_bytes", "turntable",
]

MAX_GRID_SIZE = 4096  # marching-cubes grids above this are refused whatever the memory
# Peak memory of decoding, measured with transmitter-small on one CPU thread (grid 64-256: 70-134
# bytes per grid sample; turntables at 128-512 px: STF 190-580 and NeRF about 5,000 bytes per pixel),
# rounded up.
_MESH_BYTES_PER_SAMPLE = 160
_RENDER_BYTES_PER_PIXEL = {"stf": 640, "nerf": 6000}
_RENDER_BASE_BYTES = 64e6
_MODE_NAMES = {"nerf": "NeRF", "stf": "STF"}
PROGRESS_GRID_SIZE = 256  # from this grid on, decoding shows a progress bar


def load_decoder(
    name: str, device: Union[str, torch.device, None] = None, cache_dir=None, progress: bool = True
) -> torch.nn.Module:
    """The registered model `name`, loaded to decode latents only, in eval mode.

    A `ChannelsDecoder` (`decoder`) loads as it is. For a `Transmitter` (`transmitter`, or one
    registered), a `ChannelsDecoder` is built from its decoder part and takes that part of its
    checkpoint (`shap_e.models.weights_io.decoder_state`): the same latents give the same fields,
    and the encoder's weights (half of the release transmitter) are never read into memory.
    """
    from shap_e.models.configs import model_from_config
    from shap_e.models.download import load_checkpoint, load_config, load_model, load_state_dict_strict
    from shap_e.models.weights_io import decoder_config, decoder_state
    from shap_e.util.config import skip_weight_init

    config = load_config(name)
    if config.get("name") != "Transmitter":
        return load_model(name, device=device, cache_dir=cache_dir, progress=progress)
    state = decoder_state(load_checkpoint(name, device, progress=progress, cache_dir=cache_dir))
    with skip_weight_init():  # every persistent tensor is assigned from the checkpoint below
        xm = model_from_config(decoder_config(config), device=device)
    load_state_dict_strict(xm, state, f"the decoder part of {name!r}", assign=True)
    return xm.eval()


@torch.no_grad()
def decode_latent_images(
    xm: Any,
    latent: torch.Tensor,
    cameras: Union[DifferentiableCameraBatch, ProjectiveCamera],
    rendering_mode: str = "stf",
    *,
    generator: Optional[torch.Generator] = None,
    query_dtype: Union[None, str, torch.dtype] = "auto",
) -> List[Image.Image]:
    """Render one latent `[d_latent_total]` in every view of `cameras` -> one PIL image per view.

    cameras: batch shape `(1, n_views)` (`create_pan_cameras`), official or typed.

    NeRF mode is stochastic (`generator`, default the global RNG, as the reference); STF mode is
    deterministic. Pixel values are truncated to uint8 after clamping to 0..255, as the reference.
    `query_dtype`: the NeRF field's precision. "auto" (default) is bfloat16 where the hardware has
    native bf16 and the MLP is wide (`shap_e.util.precision.resolve_query_dtype`: the release
    decoder on an AVX512-BF16 CPU or a GPU, about 1.9x faster on CPU, pixels within a few levels of
    float32), else float32; None forces float32. STF meshes are float32 unless a dtype is given.
    """
    cameras = as_projective(cameras)
    check_rendering_mode(xm, rendering_mode)
    views = math.prod(cameras.shape)
    check_render_memory(cameras.height, views, rendering_mode, f"rendering {views} views of {cameras.height} pixels",
                        latent.device)
    params = _params(xm, latent)
    if rendering_mode != "nerf" and query_dtype == "auto":
        query_dtype = None
    query_dtype = resolve_query_dtype(query_dtype, latent.device, xm.renderer.nerstf.d_hidden)
    out = xm.renderer.render_cameras(
        cameras, params, rendering_mode=rendering_mode, generator=generator, query_dtype=query_dtype
    )
    images = out.channels.clamp(0, 255).to(torch.uint8)[0]  # [*inner, H, W, 3]
    frames = images.reshape(-1, *images.shape[-3:]).cpu().numpy()
    return [Image.fromarray(frame) for frame in frames]


@torch.no_grad()
def decode_latent_mesh(
    xm: Any,
    latent: torch.Tensor,
    *,
    grid_size: Optional[int] = None,
    mesh_mode: str = "fast",
    query_dtype: Optional[torch.dtype] = None,
    vertex_placement: str = "reference",
) -> TorchMesh:
    """The STF mesh of one latent, with linear `R, G, B` vertex colours (grid: the config's, 128).

    `mesh_mode="fast"` (default) evaluates the SDF only in a narrow band around the surface and
    gives the same mesh as `"exact"` (the whole grid, as the reference); `query_dtype=torch.bfloat16`
    trades exactness (vertices move by a fraction of a grid step) for about 1.6x speed.
    `vertex_placement="sampled"` puts the vertices on the field's true zero level set; the default
    `"reference"` reproduces the release, whose mesh is shrunk by (G - 1) / (G + 1) about the centre.
    A grid that cannot fit in memory is refused before any work (ResourceLimitError); from a grid
    of 256 on, a progress bar counts the field queries on stderr.
    """
    if grid_size is not None:
        check_mesh_memory(grid_size, "grid_size", latent.device)
    return xm.renderer.extract_mesh(
        _params(xm, latent), grid_size=grid_size, mesh_mode=mesh_mode, query_dtype=query_dtype,
        vertex_placement=vertex_placement, progress=grid_size is not None and grid_size >= PROGRESS_GRID_SIZE,
    )[0]


def latent_color_fn(xm: Any, latent: torch.Tensor, chunk: int = 65536):
    """The texture field of one latent as `color_fn(points [P, 3]) -> [P, 3]` linear RGB in [0, 1].

    For `shap_e.rendering.export.save_textured_glb`, which bakes it into a UV texture. The STF
    colour head is sRGB; it is converted to linear as the vertex colours are
    (docs/behaviour.md#vertex-colours-and-shading).
    """
    from shap_e.rendering.color import srgb_to_linear

    with torch.no_grad():  # a sampled latent is an inference tensor: autograd must not record it
        params = xm.renderer.mlp_params(_params(xm, latent))
    nerstf = xm.renderer.nerstf

    @torch.no_grad()
    def color_fn(points: torch.Tensor) -> torch.Tensor:
        points = torch.as_tensor(points, dtype=torch.float32, device=latent.device)
        colors = [
            nerstf.query(points[None, i:i + chunk], params, heads=("color_stf",)).color_stf[0]
            for i in range(0, len(points), chunk)
        ]
        return srgb_to_linear(torch.cat(colors))

    return color_fn


def turntable(
    xm: Any,
    latent: torch.Tensor,
    size: int = 64,
    n_views: int = 20,
    rendering_mode: str = "nerf",
    *,
    generator: Optional[torch.Generator] = None,
) -> List[Image.Image]:
    """`n_views` frames of one latent spinning once around +Z, ready for `save_gif`/`save_mp4`."""
    device = xm.renderer.void.background.device
    cameras = turntable_cameras(size, n_views, device)
    return decode_latent_images(xm, latent, cameras, rendering_mode, generator=generator)


def check_rendering_mode(xm: Any, rendering_mode: str) -> None:
    """Refuse a rendering mode whose heads the model's registry entry says were never trained
    (`ModelSpec.render_modes`, recorded by `load_model` as `xm.registry_spec`): such views come out
    black. A model built another way is not checked."""
    spec = getattr(xm, "registry_spec", None)
    if spec is not None:
        check_render_mode_of(spec, rendering_mode)


def check_render_mode_of(spec: Any, rendering_mode: str) -> None:
    """`check_rendering_mode` for a registry entry (`ModelSpec`)."""
    modes = getattr(spec, "render_modes", None)
    if modes is not None and rendering_mode in ("nerf", "stf") and rendering_mode not in modes:
        raise InvalidArgumentError(
            f"{spec.name} has no trained {_MODE_NAMES[rendering_mode]} heads (its views would be black): render it with "
            f"{modes[0]} (rendering_mode={modes[0]!r}, --render-mode {modes[0]})"
        )


def mesh_memory_bytes(grid_size: int) -> float:
    """About how much memory extracting one mesh on a `grid_size`^3 grid needs."""
    return _MESH_BYTES_PER_SAMPLE * float(grid_size) ** 3


def check_mesh_memory(grid_size: Any, name: str = "grid_size", device: Any = None) -> None:
    """Refuse a marching-cubes grid that is not an int in [8, MAX_GRID_SIZE] or cannot fit in memory."""
    check_int(grid_size, name, 8, MAX_GRID_SIZE)

    def advice(free: int) -> str:
        largest = int((free / _MESH_BYTES_PER_SAMPLE) ** (1 / 3))
        return f"use {name} {largest} or less"

    check_fits(mesh_memory_bytes(grid_size), f"{name} {grid_size}", advice, device)


def render_memory_bytes(size: int, n_views: int, rendering_mode: str) -> float:
    """About how much memory rendering `n_views` views of `size` x `size` pixels needs."""
    per_pixel = _RENDER_BYTES_PER_PIXEL.get(rendering_mode, max(_RENDER_BYTES_PER_PIXEL.values()))
    return _RENDER_BASE_BYTES + per_pixel * float(size) ** 2 * n_views


def check_render_memory(size: int, n_views: int, rendering_mode: str, what: str, device: Any = None) -> None:
    """Refuse a turntable of `n_views` views of `size` pixels that cannot fit in memory (`what` names
    the request in the error, e.g. "--size 8192 with 20 views")."""
    def advice(free: int) -> str:
        largest = int(((free - _RENDER_BASE_BYTES) / (_RENDER_BYTES_PER_PIXEL.get(rendering_mode, 6000) * n_views))
                      ** 0.5) if free > _RENDER_BASE_BYTES else 0
        return f"render at {largest} pixels or less, or fewer views"

    check_fits(render_memory_bytes(size, n_views, rendering_mode), what, advice, device)


def _params(xm: Any, latent: torch.Tensor):
    """NeRSTF params of one latent, after checking its size, dtype and values against the model."""
    if not isinstance(latent, torch.Tensor) or latent.ndim != 1:
        shape = tuple(latent.shape) if isinstance(latent, torch.Tensor) else type(latent).__name__
        raise InvalidArgumentError(
            f"latent must be one flat latent vector [d], got {shape}; index a batch with latents[i]"
        )
    expected = _latent_size(xm)
    if expected is not None and latent.shape[0] != expected:
        raise InvalidArgumentError(f"latent has {latent.shape[0]} entries but this model expects {expected}")
    return xm.bottleneck_to_params(as_float_latent(latent, "latent")[None])


def _latent_size(xm: Any) -> Optional[int]:
    """latent_ctx * d_latent of a Transmitter (encoder) or ChannelsDecoder (params_proj), if known."""
    for owner in (getattr(xm, "params_proj", None), getattr(xm, "encoder", None), xm):
        ctx, width = getattr(owner, "latent_ctx", None), getattr(owner, "d_latent", None)
        if isinstance(ctx, int) and isinstance(width, int):
            return ctx * width
    return None
