"""`shap-e encode`, `shap-e decode` and `shap-e render`: between asset files, latents and pictures.

`encode_asset` and `decode_latent` are the commands' work once the model is loaded; the web app
(`shap-e app`) calls them with its models loaded once.
"""
import time
from pathlib import Path
from typing import List, Tuple

import torch

from shap_e import __version__
from shap_e.cli.common import (
    CliError,
    add_sample_output_options,
    check_sample_output,
    load_latent,
    parse_formats,
    pick_device,
    say,
    write_sample,
)


def add_commands(commands) -> None:
    encode = commands.add_parser("encode", help="asset file -> latent", description="Encode a 3D asset to a latent.")
    encode.add_argument("asset", help="OBJ, PLY, STL, OFF, GLB or glTF file")
    encode.add_argument("-o", "--output", required=True, help="latent file to write (.pt)")
    encode.add_argument("--seed", type=int, default=0)
    encode.add_argument("--refine-steps", type=int, default=0,
                        help="refine the latent against the asset for this many steps after the encoder (e.g. 400)")
    add_model_options(encode, "registry name of the transmitter")
    encode.set_defaults(run=run_encode)

    decode = commands.add_parser("decode", help="latent -> mesh files",
                                 description="Decode a latent to a sample folder: meshes, latent.pt, meta.json.")
    decode.add_argument("latent", help="a latent file written by `shap-e encode` or `shap-e text`")
    decode.add_argument("-o", "--output", required=True, help="output folder")
    add_sample_output_options(decode)
    add_model_options(decode, "registry name of the decoder/transmitter")
    decode.set_defaults(run=run_decode)

    render = commands.add_parser("render", help="latent -> turntable", description="Render a latent's turntable.")
    render.add_argument("latent", help="a latent file")
    render.add_argument("-o", "--output", required=True, help="GIF or MP4 file to write")
    render.add_argument("--size", type=int, default=128, help="frame size in pixels")
    render.add_argument("--views", type=int, default=20, help="number of frames")
    render.add_argument("--render-mode", choices=("nerf", "stf"), default="stf")
    add_model_options(render, "registry name of the decoder/transmitter")
    render.set_defaults(run=run_render)


def add_model_options(parser, model_help: str) -> None:
    """--model (default: the transmitter), --device and --cache-dir, shared by the asset commands."""
    parser.add_argument("--model", default="transmitter", help=model_help)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    parser.add_argument("--cache-dir", help="model cache")


def run_encode(args) -> None:
    from shap_e.models.download import load_model

    check_encode(args)
    device = pick_device(args.device)
    transmitter = load_model(args.model, device=device, cache_dir=args.cache_dir)
    encode_asset(args, transmitter, device)


def check_encode(args) -> None:
    if not Path(args.asset).is_file():
        raise CliError(f"asset {args.asset!r} does not exist")
    if args.refine_steps < 0:
        raise CliError(f"--refine-steps must be at least 0, got {args.refine_steps}")


def encode_asset(args, transmitter, device) -> Path:
    """Encode `args.asset` with the loaded `transmitter` and write the latent to `args.output`."""
    from shap_e.encoding import encode

    check_encode(args)
    out = Path(args.output)
    latent = encode(args.asset, transmitter, device=device, generator=torch.Generator().manual_seed(args.seed),
                    seed=args.seed, refine_steps=args.refine_steps)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        torch.save(latent.cpu(), tmp)
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CliError(f"cannot write {out}: {e.strerror or e}") from e
    say(f"wrote {out} ({latent.numel()} numbers)")
    return out


def run_decode(args) -> None:
    from shap_e.models.download import load_model

    check_decode(args)
    device = pick_device(args.device)
    xm = load_model(args.model, device=device, cache_dir=args.cache_dir)
    decode_latent(args, xm, device)


def check_decode(args) -> Tuple[List[str], torch.Tensor]:
    """Check `args` of `shap-e decode`; returns its mesh formats and the `[d_latent]` latent."""
    check_sample_output(args)
    return parse_formats(args.format), load_latent(args.latent)


def decode_latent(args, xm, device) -> Path:
    """Decode the latent file `args.latent` with the loaded `xm` into the sample folder `args.output`."""
    formats, latent = check_decode(args)
    meta = {"latent": Path(args.latent).name, "decoder": args.model, "grid_size": args.grid_size,
            "package_version": __version__, "seconds": {}}
    t0 = time.perf_counter()
    write_sample(xm, latent.to(device), Path(args.output), formats, meta, args)
    say(f"wrote {args.output} in {time.perf_counter() - t0:.1f} s")
    return Path(args.output)


def run_render(args) -> None:
    from shap_e.models.decode import turntable
    from shap_e.models.download import load_model
    from shap_e.util.animation import save_gif, save_mp4

    suffix = Path(args.output).suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise CliError(f"--output must end in .gif or .mp4, got {args.output!r}")
    latent = load_latent(args.latent)
    device = pick_device(args.device)
    xm = load_model(args.model, device=device, cache_dir=args.cache_dir)
    frames = turntable(xm, latent.to(device), size=args.size, n_views=args.views, rendering_mode=args.render_mode)
    (save_gif if suffix == ".gif" else save_mp4)(frames, args.output)
    say(f"wrote {args.output}")
