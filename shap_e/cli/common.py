"""Pieces shared by the commands: device choice, model choice, atomic output folders, sample folders, options."""
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def say(message: str) -> None:
    print(message, file=sys.stderr)


def pick_device(name: str) -> torch.device:
    """`auto` picks CUDA, then MPS, then the CPU, and says which."""
    if name == "auto":
        if torch.cuda.is_available():
            device = torch.device("cuda")
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            device = torch.device("mps")
        else:
            device = torch.device("cpu")
        say(f"device: {device} (auto)")
        return device
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    return torch.device(name)


def choose_model(requested: Optional[str], official: str, small: str, cache_dir: Optional[str]) -> str:
    """The requested model, else the official one if cached, else the small bundled one."""
    from shap_e.models.download import weights_cached
    from shap_e.models.registry import MODELS

    if requested:
        if requested not in MODELS:
            raise CliError(f"--model {requested!r} is not in the registry; known: {', '.join(sorted(MODELS))}")
        return requested
    if weights_cached(official, cache_dir):
        say(f"model: {official} (official weights found in the cache)")
        return official
    if small in MODELS:
        say(f"model: {small} (bundled); for the official model run `shap-e download {official}`")
        return small
    raise CliError(
        f"no model available offline: the official {official} weights are not in the cache and no small "
        f"bundled model is installed; run `shap-e download {official}` (needs network)"
    )


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary folder beside `final`; it becomes `final` only if the block succeeds."""
    parent = final.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
    except OSError as e:
        raise CliError(f"cannot write to {parent}: {e.strerror or e}") from e
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


FORMATS = ("glb", "ply", "obj")


def add_sample_output_options(parser) -> None:
    """What a sample folder holds besides latent.pt and meta.json: mesh formats, mesh grid, turntables."""
    parser.add_argument("--format", default="glb,ply", help=f"comma-separated mesh formats from {FORMATS}")
    parser.add_argument("--texture", action="store_true", help="also write a UV-textured GLB (needs xatlas)")
    parser.add_argument("--grid-size", type=int, default=128, help="marching-cubes grid (>= 8)")
    add_vertex_placement_option(parser)
    parser.add_argument("--gif", action="store_true", help="write a turntable GIF")
    parser.add_argument("--mp4", action="store_true", help="write a turntable MP4 (needs imageio-ffmpeg)")
    parser.add_argument("--render-mode", choices=("nerf", "stf"), default="stf", help="turntable renderer")
    parser.add_argument("--render-size", type=int, default=128, help="turntable frame size in pixels")


def parse_formats(value: str) -> List[str]:
    formats = [f.strip().lower() for f in value.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise CliError(f"--format {value!r}: use a comma-separated list of {', '.join(FORMATS)}")
    return formats


def check_sample_output(args) -> None:
    if args.grid_size < 8:
        raise CliError("--grid-size must be at least 8")
    if args.render_size < 8:
        raise CliError("--render-size must be at least 8")


def write_sample(xm, latent: torch.Tensor, folder: Path, formats: List[str], meta: Dict[str, Any], args) -> None:
    """A sample folder, whole or not at all: latent.pt, mesh.<format> for each of `formats`, the
    textured GLB and turntables when `args` asks, and meta.json (`meta` plus decoding times).

    :param latent: `[d_latent]`, decoded by the transmitter or decoder `xm`.
    """
    from shap_e.rendering.export import save_mesh, save_textured_glb
    from shap_e.models.decode import decode_latent_mesh, latent_color_fn, turntable
    from shap_e.util.animation import save_gif, save_mp4

    with atomic_directory(folder) as tmp:
        torch.save(latent.detach().cpu(), tmp / "latent.pt")
        t0 = time.perf_counter()
        mesh = decode_latent_mesh(xm, latent, grid_size=args.grid_size, vertex_placement=args.vertex_placement)
        meta["seconds"]["mesh"] = round(time.perf_counter() - t0, 3)
        for fmt in formats:
            save_mesh(mesh, tmp / f"mesh.{fmt}")
        if args.texture:
            save_textured_glb(mesh, tmp / "mesh_textured.glb", latent_color_fn(xm, latent))
        if args.gif or args.mp4:
            t0 = time.perf_counter()
            frames = turntable(xm, latent, size=args.render_size, rendering_mode=args.render_mode)
            meta["seconds"]["turntable"] = round(time.perf_counter() - t0, 3)
            if args.gif:
                save_gif(frames, tmp / "turntable.gif")
            if args.mp4:
                save_mp4(frames, tmp / "turntable.mp4")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def load_latent(path: str) -> torch.Tensor:
    """A `[d_latent]` latent file written by `shap-e encode` or a sample's latent.pt."""
    if not Path(path).is_file():
        raise CliError(f"latent file {path!r} does not exist")
    latent = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(latent, torch.Tensor) or latent.ndim != 1:
        raise CliError(f"{path!r} does not hold a 1-D latent tensor")
    return latent


def add_vertex_placement_option(parser) -> None:
    from shap_e.rendering.stf import VERTEX_PLACEMENTS

    parser.add_argument(
        "--vertex-placement", choices=VERTEX_PLACEMENTS, default="reference",
        help="mesh vertices as the release places them (shrunk by (G-1)/(G+1)) or on the true surface",
    )


def add_init_strength_option(parser) -> None:
    parser.add_argument("--init-strength", type=float,
                        help="SDEdit strength in (0, 1]: start sampling from --init-latent, or for an image prior "
                        "with a latent head from the latent it reads off the picture; 1 samples from noise "
                        "(default: the model's recommended value, else 1; required with --init-latent)")


def add_init_latent_option(parser) -> None:
    parser.add_argument("--init-latent", metavar="LATENT.pt",
                        help="start sampling from this latent (written by `shap-e encode` or a sample's latent.pt) "
                        "at --init-strength: variations of it")


def resolve_init_strength(requested: Optional[float], recommended: Optional[float], prior, name: str,
                          from_latent: bool = False) -> float:
    """The SDEdit strength to sample with: `requested`, else the registry's `recommended`, else 1
    (from noise). Starting from a given latent (`from_latent`) needs `requested`; otherwise a
    strength below 1 needs a prior with a latent head."""
    from shap_e.diffusion.sample import check_strength

    if from_latent and requested is None:
        raise CliError("--init-latent needs --init-strength in (0, 1]: how much noise to add to the latent")
    strength = requested if requested is not None else (recommended if recommended is not None else 1.0)
    try:
        check_strength(strength, "--init-strength")
    except ValueError as error:
        raise CliError(str(error)) from None
    if strength < 1 and not from_latent and getattr(prior, "latent_head", None) is None:
        raise CliError(f"--init-strength {strength} needs a prior with a latent head; {name!r} has none (use 1)")
    return strength


EVERY_STEP = "all"


def _max_sigma_argument(value: str) -> Union[float, str]:
    """`--guidance-max-sigma`: a positive number, or `all` (guide every step)."""
    import argparse

    if value.strip().lower() == EVERY_STEP:
        return EVERY_STEP
    try:
        sigma = float(value)
    except ValueError:
        sigma = float("nan")
    if not sigma > 0 or sigma == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is neither a positive number nor {EVERY_STEP!r}")
    return sigma


def add_guidance_max_sigma_option(parser) -> None:
    parser.add_argument("--guidance-max-sigma", type=_max_sigma_argument, metavar="SIGMA|all",
                        help="classifier-free guidance only at the sampler steps with sigma <= SIGMA, the conditional "
                        f"prediction alone above; {EVERY_STEP!r} guides every step (default: the model's recommended "
                        f"value, else {EVERY_STEP})")


def resolve_guidance_max_sigma(requested: Union[float, str, None], recommended: Optional[float]) -> Optional[float]:
    """The `guidance_max_sigma` to sample with: `requested` (None when it is `all`), else the registry's
    `recommended` (None: every step)."""
    if requested is None:
        return recommended
    return None if requested == EVERY_STEP else requested
