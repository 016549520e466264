"""Pieces shared by the commands: device and model choice, output locations, sample folders, checked options."""
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch

from shap_e.util.atomic import atomic_directory, check_writable, clean_stale_temporaries
from shap_e.util.checks import check_int, check_number, shorten
from shap_e.util.errors import InvalidArgumentError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_SEED = 2**63 - 1
FORMATS = ("glb", "ply", "obj")
MAX_RENDER_SIZE = 4096
MIN_TEXTURE_SIZE, MAX_TEXTURE_SIZE = 8, 8192
MIN_FACES = 4  # `--max-faces`: a tetrahedron's


class CliError(InvalidArgumentError):
    """Bad input: printed as one line, exit status 2."""


def say(message: str) -> None:
    print(message, file=sys.stderr)


def pick_device(name: str) -> torch.device:
    """`auto` picks CUDA, then MPS, then the CPU, and says which; a named device must exist here."""
    from shap_e.util.config import available_devices, resolve_device

    if name == "auto":
        available = available_devices()
        device = torch.device(next((d for d in available if d != "cpu"), "cpu"))
        say(f"device: {device} (auto)")
        return device
    return resolve_device(name)


def check_seed(seed: int, count: int = 1) -> None:
    """Seeds `seed .. seed + count - 1` must fit torch's generator (0 .. 2**63 - 1)."""
    check_int(seed, "--seed", 0, MAX_SEED - count + 1)


def prepare_output_folder(folder: Union[str, Path]) -> Path:
    """Check, before any model is loaded, that `folder` can be written (creating it and its
    parents), and remove the temporaries that killed runs of this package left in it."""
    folder = check_writable(folder)
    for stale in clean_stale_temporaries(folder):
        say(f"removed {stale.name}, left by an interrupted run")
    return folder


def choose_model(requested: Optional[str], official: str, small: str, cache_dir: Optional[str],
                 kind: Optional[str] = None) -> str:
    """The requested model, else the official one if its cached weights are complete and correct,
    else the small bundled one (saying why). `kind` (`text`, `image`, `transmitter`): the kind of
    model the command needs; a registered model of another kind is refused, naming the command it
    belongs to."""
    from shap_e.models.cache import CORRUPT, cache_state
    from shap_e.models.registry import MODELS

    if requested:
        if requested not in MODELS:
            raise CliError(f"--model {requested!r} is not in the registry; known: {', '.join(sorted(MODELS))}")
        check_kind(requested, kind)
        return requested
    state = cache_state(official, cache_dir)
    if state == "ok":
        say(f"model: {official} (official weights found in the cache)")
        return official
    if small in MODELS:
        if state == CORRUPT:
            say(f"model: {small} (bundled); the cached {official} weights are partial or corrupt: run "
                f"`shap-e download {official} --redownload` to use it")
        else:
            say(f"model: {small} (bundled); for the official model run `shap-e download {official}`")
        return small
    raise CliError(
        f"no model available offline: the official {official} weights are not in the cache and no small "
        f"bundled model is installed; run `shap-e download {official}` (needs network)"
    )


_COMMANDS = {"text": "shap-e text", "image": "shap-e image", "transmitter": "shap-e encode/decode/render",
             "decoder": "shap-e decode/render", "diffusion": "load_config (it is a diffusion config)"}
_ARTICLES = {"text": "a text model", "image": "an image model", "transmitter": "a transmitter",
             "decoder": "a decoder", "diffusion": "a diffusion config"}


def check_kind(name: str, needed: Optional[str]) -> None:
    """Refuse registry model `name` when it is not of the `needed` kind (a transmitter may decode too)."""
    from shap_e.models.registry import get_spec

    kind = get_spec(name).kind
    if needed is None or kind is None or kind == needed or (needed == "decoder" and kind == "transmitter"):
        return
    raise CliError(f"{name} is {_ARTICLES[kind]}: use {_COMMANDS[kind]}")


def add_sample_output_options(parser) -> None:
    """What a sample folder holds besides latent.pt and meta.json: mesh formats, mesh grid, face budget,
    turntables."""
    parser.add_argument("--format", default="glb,ply", help=f"comma-separated mesh formats from {FORMATS}")
    parser.add_argument("--texture", action="store_true", help="also write a UV-textured GLB (needs xatlas)")
    parser.add_argument("--texture-size", type=int, default=1024, metavar="N",
                        help=f"side of the --texture image in texels ({MIN_TEXTURE_SIZE} to {MAX_TEXTURE_SIZE}; "
                        "default %(default)s)")
    parser.add_argument("--grid-size", type=int, default=128, help="marching-cubes grid (>= 8)")
    parser.add_argument("--max-faces", type=int, metavar="N",
                        help=f"at most N (>= {MIN_FACES}) faces in every mesh file, the textured GLB included: "
                        "a larger mesh is decimated (quadric edge collapse), vertex colours kept; e.g. 20000 "
                        "makes a grid-128 GLB of well under 1 MB (default: every face marching cubes makes)")
    add_vertex_placement_option(parser)
    parser.add_argument("--gif", action="store_true", help="write a turntable GIF")
    parser.add_argument("--mp4", action="store_true", help="write a turntable MP4 (needs imageio-ffmpeg)")
    parser.add_argument("--render-mode", choices=("nerf", "stf"), default="stf", help="turntable renderer")
    parser.add_argument("--render-size", type=int, default=128, help="turntable frame size in pixels")


def parse_formats(value: str) -> List[str]:
    formats = [f.strip().lower() for f in value.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise CliError(f"--format {shorten(value, 40)!r}: use a comma-separated list of {', '.join(FORMATS)}")
    return list(dict.fromkeys(formats))


def require_module(module: str, option: str, install: str) -> None:
    """Refuse `option` up front when the optional `module` it needs is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise CliError(f"{option} needs the optional package {module}: pip install {install}")


def check_sample_output(args) -> None:
    """The sample-folder options (`add_sample_output_options`), checked before any model is loaded."""
    from shap_e.models.decode import check_mesh_memory, check_render_memory

    check_mesh_memory(args.grid_size, "--grid-size")
    if args.max_faces is not None:
        check_int(args.max_faces, "--max-faces", MIN_FACES)
    if args.gif or args.mp4:
        check_int(args.render_size, "--render-size", 8, MAX_RENDER_SIZE)
        check_render_memory(args.render_size, 20, args.render_mode, f"--render-size {args.render_size}")
    if args.texture:
        check_int(args.texture_size, "--texture-size", MIN_TEXTURE_SIZE, MAX_TEXTURE_SIZE)
        require_module("xatlas", "--texture", "xatlas (or shap-e[texture])")
    if args.mp4:
        require_module("imageio_ffmpeg", "--mp4", "imageio imageio-ffmpeg (or shap-e[video])")


def write_sample(xm, latent: torch.Tensor, folder: Path, meta: Dict[str, Any], args, overwrite: bool = False) -> None:
    """A sample folder, complete or not at all: latent.pt, mesh.<format> for each of `meta["formats"]`,
    the textured GLB and turntables when `args` asks, and meta.json (`meta` plus decoding times) last.

    :param latent: `[d_latent]`, decoded by the transmitter or decoder `xm`.
    """
    from shap_e.models.decode import decode_latent_mesh, latent_color_fn, turntable
    from shap_e.rendering.export import save_mesh, save_textured_glb
    from shap_e.util.animation import save_gif, save_mp4
    from shap_e.util.tensor_files import save_latent

    with atomic_directory(folder, overwrite=overwrite) as tmp:
        save_latent(tmp / "latent.pt", latent)
        t0 = time.perf_counter()
        mesh = decode_latent_mesh(xm, latent, grid_size=args.grid_size, vertex_placement=args.vertex_placement)
        meta["seconds"]["mesh"] = round(time.perf_counter() - t0, 3)
        mesh = within_budget(mesh, args.max_faces, folder.name, meta)
        empty = len(mesh.faces) == 0
        if empty:
            say(f"note: the mesh of {folder.name} is empty (the field has no surface in the box); its files hold "
                "no geometry" + (" and it has no texture" if args.texture else ""))
        for fmt in meta["formats"]:
            save_mesh(mesh, tmp / f"mesh.{fmt}", allow_empty=True)
        if args.texture and not empty:
            save_textured_glb(mesh, tmp / "mesh_textured.glb", latent_color_fn(xm, latent), args.texture_size)
        if args.gif or args.mp4:
            t0 = time.perf_counter()
            frames = turntable(xm, latent, size=args.render_size, rendering_mode=args.render_mode)
            meta["seconds"]["turntable"] = round(time.perf_counter() - t0, 3)
            if args.gif:
                save_gif(frames, tmp / "turntable.gif")
            if args.mp4:
                save_mp4(frames, tmp / "turntable.mp4")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, allow_nan=False, ensure_ascii=False) + "\n",
                                       encoding="utf-8")


def within_budget(mesh, max_faces: Optional[int], name: str, meta: Dict[str, Any]):
    """`mesh` (a TorchMesh) as it is when it has at most `max_faces` faces (or `max_faces` is None),
    else decimated to that budget as a TriMesh; the decimation time goes to `meta["seconds"]`."""
    if max_faces is None or len(mesh.faces) <= max_faces:
        return mesh
    from shap_e.rendering.decimate import decimate

    t0 = time.perf_counter()
    tri = mesh.tri_mesh()
    tri.check_finite(f"refusing to write the mesh files of {name}")
    decimated = decimate(tri, max_faces)
    meta["seconds"]["decimation"] = round(time.perf_counter() - t0, 3)
    say(f"decimated the mesh of {name} from {len(tri.faces)} to {len(decimated.faces)} faces (--max-faces {max_faces})")
    return decimated


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
    strength below 1 needs a prior with a latent head (not checked when `prior` is None)."""
    from shap_e.diffusion.sample import check_strength

    if from_latent and requested is None:
        raise CliError("--init-latent needs --init-strength in (0, 1]: how much noise to add to the latent")
    strength = requested if requested is not None else (recommended if recommended is not None else 1.0)
    check_strength(strength, "--init-strength")
    if prior is not None and strength < 1 and not from_latent and getattr(prior, "latent_head", None) is None:
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
        raise argparse.ArgumentTypeError(f"{value[:40]!r} is neither a positive number nor {EVERY_STEP!r}")
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


def check_guidance(value: float, name: str = "--guidance") -> float:
    from shap_e.diffusion.checks import GUIDANCE_LIMIT

    return check_number(value, name, -GUIDANCE_LIMIT, GUIDANCE_LIMIT)
