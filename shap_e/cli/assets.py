"""`shap-e encode`, `shap-e decode` and `shap-e render`: between asset files, latents and pictures.

Without `--model`, `encode` uses the official transmitter when its weights are cached and the
bundled `transmitter-small` otherwise; `decode` and `render` pick the model that fits the latent's
size. Outputs are checked for writability before any model is loaded, written atomically, and an
existing output is only replaced with `--overwrite`. `encode_asset` and `decode_latent` are the
commands' work once the model is loaded; the web app (`shap-e app`) calls them with its models
loaded once.
"""
import time
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from shap_e import __version__
from shap_e.cli.common import (
    CliError,
    add_sample_output_options,
    check_sample_output,
    check_seed,
    choose_model,
    parse_formats,
    pick_device,
    prepare_output_folder,
    require_module,
    say,
    write_sample,
)
from shap_e.util.checks import check_int, shorten

MAX_REFINE_STEPS = 100_000
MAX_VIEWS = 360


def add_commands(commands) -> None:
    encode = commands.add_parser("encode", help="asset file -> latent", description="Encode a 3D asset to a latent.")
    encode.add_argument("asset", help="OBJ, PLY, STL, OFF, GLB or glTF file")
    encode.add_argument("-o", "--output", required=True, help="latent file to write (.pt)")
    encode.add_argument("--seed", type=int, default=0)
    encode.add_argument("--refine-steps", type=int, default=0,
                        help="refine the latent against the asset for this many steps after the encoder (e.g. 400)")
    add_model_options(encode, "registry name of the transmitter (default: transmitter if cached, else "
                      "transmitter-small)")
    encode.set_defaults(run=run_encode)

    decode = commands.add_parser("decode", help="latent -> mesh files",
                                 description="Decode a latent to a sample folder: meshes, latent.pt, meta.json.")
    decode.add_argument("latent", help="a latent file written by `shap-e encode` or `shap-e text`")
    decode.add_argument("-o", "--output", required=True, help="output folder")
    add_sample_output_options(decode)
    add_model_options(decode, "registry name of the decoder/transmitter (default: the one that fits the latent)")
    decode.set_defaults(run=run_decode)

    render = commands.add_parser("render", help="latent -> turntable", description="Render a latent's turntable.")
    render.add_argument("latent", help="a latent file")
    render.add_argument("-o", "--output", required=True, help="GIF or MP4 file to write")
    render.add_argument("--size", type=int, default=128, help="frame size in pixels")
    render.add_argument("--views", type=int, default=20, help="number of frames")
    render.add_argument("--render-mode", choices=("nerf", "stf"), default="stf")
    add_model_options(render, "registry name of the decoder/transmitter (default: the one that fits the latent)")
    render.set_defaults(run=run_render)


def add_model_options(parser, model_help: str) -> None:
    """--model, --device, --cache-dir and --overwrite, shared by the asset commands."""
    parser.add_argument("--model", help=model_help)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    parser.add_argument("--cache-dir", help="model cache")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")


def check_new_output(path: Path, overwrite: bool) -> None:
    """Refuse to replace an existing output unless `overwrite`; check that its folder is writable."""
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise CliError(f"{path} already exists; pass --overwrite to replace it, or choose another --output")
    prepare_output_folder(path.parent)


def model_for_latent(requested: Optional[str], latent: torch.Tensor, cache_dir) -> str:
    """The registered decoder for `latent`: `requested`, else one whose priors sample latents of its
    size (cached weights first), else the official transmitter if cached, else the bundled one."""
    from shap_e.models.cache import weights_cached
    from shap_e.models.download import load_config
    from shap_e.models.registry import MODELS

    if requested:
        return choose_model(requested, "transmitter", "transmitter-small", cache_dir, kind="decoder")
    fitting = []
    for name, spec in MODELS.items():
        if spec.decoders and spec.kind in ("text", "image") and load_config(name).get("d_latent") == latent.numel():
            fitting += [d for d in spec.decoders if d in MODELS and d not in fitting]
    if not fitting:
        return choose_model(None, "transmitter", "transmitter-small", cache_dir)
    chosen = next((d for d in fitting if weights_cached(d, cache_dir)), fitting[-1])
    say(f"model: {chosen} (fits a latent of {latent.numel()} numbers)")
    return chosen


def run_encode(args) -> None:
    from shap_e.models.download import load_model

    name = check_encode(args)
    device = pick_device(args.device)
    transmitter = load_model(name, device=device, cache_dir=args.cache_dir)
    encode_asset(args, transmitter, device)


def check_encode(args) -> str:
    """Check `args` of `shap-e encode` before any model is loaded; returns the transmitter to use."""
    if not Path(args.asset).is_file():
        raise CliError(f"asset {shorten(args.asset)!r} does not exist or is not a file")
    check_int(args.refine_steps, "--refine-steps", 0, MAX_REFINE_STEPS)
    check_seed(args.seed)
    check_new_output(Path(args.output), args.overwrite)
    return choose_model(args.model, "transmitter", "transmitter-small", args.cache_dir, kind="transmitter")


def encode_asset(args, transmitter, device) -> Path:
    """Encode `args.asset` with the loaded `transmitter` and write the latent to `args.output`."""
    from shap_e.encoding import encode
    from shap_e.util.tensor_files import save_latent

    out = Path(args.output)
    latent = encode(args.asset, transmitter, device=device, generator=torch.Generator().manual_seed(args.seed),
                    seed=args.seed, refine_steps=args.refine_steps, progress=True)
    save_latent(out, latent)
    say(f"wrote {out} ({latent.numel()} numbers)")
    return out


def run_decode(args) -> None:
    from shap_e.models.download import load_model

    _, latent = check_decode(args)
    name = model_for_latent(args.model, latent, args.cache_dir)
    device = pick_device(args.device)
    xm = load_model(name, device=device, cache_dir=args.cache_dir)
    decode_latent(args, xm, device, name)


def check_decode(args) -> Tuple[List[str], torch.Tensor]:
    """Check `args` of `shap-e decode` before any model is loaded; returns its mesh formats and the
    `[d_latent]` latent."""
    from shap_e.util.tensor_files import load_latent

    formats = parse_formats(args.format)
    check_sample_output(args)
    latent = load_latent(args.latent)
    check_new_output(Path(args.output), args.overwrite)
    return formats, latent


def decode_latent(args, xm, device, decoder: Optional[str] = None) -> Path:
    """Decode the latent file `args.latent` with the loaded `xm` (registry name `decoder`, default
    `args.model`) into the sample folder `args.output`."""
    formats, latent = check_decode(args)
    meta = {"latent": Path(args.latent).name, "decoder": decoder or args.model, "grid_size": args.grid_size,
            "vertex_placement": args.vertex_placement, "max_faces": args.max_faces,
            "texture_size": args.texture_size if args.texture else None, "formats": formats,
            "package_version": __version__, "seconds": {}}
    t0 = time.perf_counter()
    write_sample(xm, latent.to(device), Path(args.output), meta, args, overwrite=args.overwrite)
    say(f"wrote {args.output} in {time.perf_counter() - t0:.1f} s")
    return Path(args.output)


def run_render(args) -> None:
    from shap_e.models.decode import check_render_memory, check_render_mode_of, turntable
    from shap_e.models.download import load_model
    from shap_e.models.registry import get_spec
    from shap_e.util.animation import save_gif, save_mp4
    from shap_e.util.tensor_files import load_latent

    suffix = Path(args.output).suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise CliError(f"--output must end in .gif or .mp4, got {shorten(args.output)!r}")
    check_int(args.size, "--size", 8, 4096)
    check_int(args.views, "--views", 1, MAX_VIEWS)
    check_render_memory(args.size, args.views, args.render_mode, f"--size {args.size} with {args.views} views")
    if suffix == ".mp4":
        require_module("imageio_ffmpeg", "an .mp4 --output", "imageio imageio-ffmpeg (or shap-e[video])")
    latent = load_latent(args.latent)
    out = Path(args.output)
    check_new_output(out, args.overwrite)
    name = model_for_latent(args.model, latent, args.cache_dir)
    check_render_mode_of(get_spec(name), args.render_mode)
    device = pick_device(args.device)
    xm = load_model(name, device=device, cache_dir=args.cache_dir)
    frames = turntable(xm, latent.to(device), size=args.size, n_views=args.views, rendering_mode=args.render_mode)
    (save_gif if suffix == ".gif" else save_mp4)(frames, out)
    say(f"wrote {out}")

