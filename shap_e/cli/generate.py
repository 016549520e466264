"""`shap-e text` and `shap-e image`: sample latents, then write meshes, turntables and meta.json.

Everything the user gave is checked, and the output folder planned, before any model is loaded.
Each sample is drawn alone from its own seed (`--batch N` draws seeds seed .. seed + N - 1 one
after another), so sample i of a batch is bit for bit the sample of seed + i drawn alone.
"""
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Dict, List

import torch

from shap_e import __version__
from shap_e.cli.common import (
    CliError,
    DTYPES,
    add_guidance_max_sigma_option,
    add_init_strength_option,
    add_vertex_placement_option,
    check_guidance,
    check_seed,
    choose_model,
    pick_device,
    prepare_output_folder,
    resolve_guidance_max_sigma,
    resolve_init_strength,
    say,
)
from shap_e.cli.samples import Job, existing_state, plan_folders
from shap_e.diffusion.presets import PRESETS
from shap_e.util.atomic import atomic_directory
from shap_e.util.checks import check_int, shorten
from shap_e.util.distributed import process_group, rank_share

FORMATS = ("glb", "ply", "obj")
SAMPLERS = ("heun", "euler", "euler_ancestral", "dpmpp_2m")
SMALL = {"text": "text-small", "image": "image-small"}
OFFICIAL = {"text": "text300M", "image": "image300M"}
DEFAULT_GUIDANCE = {"text": 15.0, "image": 3.0}
MAX_BATCH = 10_000  # samples per prompt
MAX_RENDER_SIZE = 4096


def add_commands(commands) -> None:
    text = commands.add_parser("text", help="text -> 3D", description="Generate 3D models from a prompt.")
    text.add_argument("prompt", nargs="?", help="what to generate, e.g. 'a red chair'")
    text.add_argument("--prompts", help="a file with one prompt per line (bulk; split across torchrun ranks)")
    image = commands.add_parser("image", help="image -> 3D", description="Generate 3D models from a picture.")
    image.add_argument("image", help="a picture of one object (PNG, JPEG, ...)")
    for parser, kind in ((text, "text"), (image, "image")):
        add_sampling_options(parser, kind)
        parser.set_defaults(run=run_generate, kind=kind)
    add_init_strength_option(image)


def add_sampling_options(parser, kind: str) -> None:
    parser.add_argument("-o", "--output", default="out", help="output folder (one sub-folder per sample)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace sample folders that hold another request (default: refuse; a folder holding "
                             "the same request is kept, so a re-run resumes an interrupted one)")
    parser.add_argument("--model", help=f"registry name (default: {OFFICIAL[kind]} if cached, else {SMALL[kind]})")
    parser.add_argument("--batch", type=int, default=1, help=f"samples per prompt (at most {MAX_BATCH})")
    parser.add_argument("--seed", type=int, default=0, help="sample i uses seed + i")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="sampler settings: default = 64 Heun steps (official), fast = DPM-Solver++(2M) "
                        "with fewer steps; --steps/--sampler override it")
    parser.add_argument("--steps", type=int, help="sampler steps (default: from --preset)")
    parser.add_argument("--guidance", type=float,
                        help="classifier-free guidance "
                             f"(default: the model's recommended value, else {DEFAULT_GUIDANCE[kind]})")
    add_guidance_max_sigma_option(parser)
    parser.add_argument("--sampler", choices=SAMPLERS, help="ODE/SDE sampler (default: from --preset)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="model dtype (default: float32 on CPU)")
    parser.add_argument("--format", default="glb,ply", help=f"comma-separated mesh formats from {FORMATS}")
    parser.add_argument("--texture", action="store_true", help="also write a UV-textured GLB (needs xatlas)")
    parser.add_argument("--grid-size", type=int, default=128, help="marching-cubes grid (>= 8)")
    add_vertex_placement_option(parser)
    parser.add_argument("--gif", action="store_true", help="write a turntable GIF")
    parser.add_argument("--mp4", action="store_true", help="write a turntable MP4 (needs imageio-ffmpeg)")
    parser.add_argument("--render-mode", choices=("nerf", "stf"), default="stf", help="turntable renderer")
    parser.add_argument("--render-size", type=int, default=128, help="turntable frame size in pixels")
    parser.add_argument("--cache-dir", help="model cache (default: $SHAP_E_CACHE or ~/.cache/shap_e)")


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


def read_prompts(args) -> List[str]:
    if args.prompts and args.prompt is not None:
        raise CliError("give a prompt or --prompts FILE, not both")
    if args.prompts:
        path = Path(args.prompts)
        if not path.is_file():
            raise CliError(f"--prompts file {shorten(str(path))!r} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise CliError(f"--prompts file {shorten(str(path))!r} is not UTF-8 text (one prompt per line)") from None
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
        if not prompts:
            raise CliError(f"--prompts file {shorten(str(path))!r} holds no prompt (one per line)")
        return prompts
    prompt = (args.prompt or "").strip()
    if not prompt:
        raise CliError("the prompt is empty; pass a description such as 'a red chair'")
    return [prompt]


def read_image(path: str):
    from PIL import Image, UnidentifiedImageError

    from shap_e.util.image_util import load_image

    try:
        return load_image(path).convert("RGB")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        raise CliError(f"image {shorten(path)!r} does not exist") from e
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise CliError(f"{shorten(path)!r} is not an image Pillow can read") from e


def validate(args) -> None:
    """Every option that needs no model, checked before anything is loaded."""
    from shap_e.diffusion.checks import MAX_STEPS
    from shap_e.models.decode import check_mesh_memory, check_render_memory

    check_int(args.batch, "--batch", 1, MAX_BATCH)
    check_seed(args.seed, args.batch)
    if args.steps is not None:
        check_int(args.steps, "--steps", 2, MAX_STEPS)
    if args.guidance is not None:
        check_guidance(args.guidance)
    check_mesh_memory(args.grid_size, "--grid-size")
    if args.gif or args.mp4:
        check_int(args.render_size, "--render-size", 8, MAX_RENDER_SIZE)
        check_render_memory(args.render_size, 20, args.render_mode, f"--render-size {args.render_size}")
    if args.texture:
        require_module("xatlas", "--texture", "xatlas (or shap-e[texture])")
    if args.mp4:
        require_module("imageio_ffmpeg", "--mp4", "imageio imageio-ffmpeg (or shap-e[video])")


def read_jobs(args) -> List[Job]:
    if args.kind == "text":
        return [Job(p, p, {"texts": [p]}) for p in read_prompts(args)]
    image = read_image(args.image)
    digest = hashlib.sha256(image.tobytes()).hexdigest()
    return [Job(Path(args.image).name, digest, {"images": [image]})]


def run_generate(args) -> None:
    from shap_e.diffusion.presets import resolve_preset
    from shap_e.models.registry import get_spec

    validate(args)
    formats = parse_formats(args.format)
    jobs = read_jobs(args)
    name = choose_model(args.model, OFFICIAL[args.kind], SMALL[args.kind], args.cache_dir, kind=args.kind)
    spec = get_spec(name)
    decoder = pick_decoder(name, args.cache_dir)
    if args.gif or args.mp4:
        from shap_e.models.decode import check_render_mode_of

        check_render_mode_of(get_spec(decoder), args.render_mode)
    settings = resolve_preset(args.preset, sampler=args.sampler, karras_steps=args.steps)
    request = {
        "model": name, "decoder": decoder, "preset": settings.name, "sampler": settings.sampler,
        "steps": settings.karras_steps,
        "guidance": args.guidance if args.guidance is not None else spec.guidance_scale or DEFAULT_GUIDANCE[args.kind],
        "guidance_max_sigma": resolve_guidance_max_sigma(args.guidance_max_sigma, spec.guidance_max_sigma),
        "init_strength": resolve_init_strength(getattr(args, "init_strength", None), spec.init_strength, None, name),
        "dtype": args.dtype, "grid_size": args.grid_size, "vertex_placement": args.vertex_placement,
        "formats": formats, "texture": args.texture, "gif": args.gif, "mp4": args.mp4,
        "render_mode": args.render_mode if args.gif or args.mp4 else None,
        "render_size": args.render_size if args.gif or args.mp4 else None,
    }
    work = plan_work(jobs, request, args)
    if args.kind == "text":
        note_unseen_words(name, [job.label for job in jobs])
    if not work:
        say("nothing to generate: every sample is already in the output folder")
        return
    with process_group():  # under torchrun: every rank loads the models, then draws its share of the samples
        device = pick_device(args.device)
        models = load_pipeline(name, decoder, device, args.cache_dir)
        resolve_init_strength(request["init_strength"], None, models["prior"], name)
        for job, folder, sample_request, state in rank_share(work):
            generate_one(models, job, folder, sample_request, state == "replace", settings, device, args)


def plan_work(jobs: List[Job], request: Dict[str, Any], args) -> List[tuple]:
    """(job, folder, request, state) for every sample still to write; says which are kept."""
    output = prepare_output_folder(args.output)
    seeds = list(range(args.seed, args.seed + args.batch))
    label_field = "prompt" if args.kind == "text" else "image"
    work = []
    for job in plan_folders(jobs, output, seeds, label_field):
        for seed in seeds:
            folder = output / f"{job.folder_stem}_seed{seed}"
            sample_request = {label_field: job.label, **({"image_sha256": job.key} if args.kind == "image" else {}),
                              "seed": seed, **request}
            state = existing_state(folder, sample_request, args.overwrite)
            if state == "kept":
                say(f"kept {folder} (it already holds this sample)")
            else:
                work.append((job, folder, sample_request, state))
    return work


def pick_decoder(name: str, cache_dir) -> str:
    """The prior's first decoder whose weights are cached, else its last (downloaded on load)."""
    from shap_e.models.cache import weights_cached
    from shap_e.models.registry import get_spec

    spec = get_spec(name)
    if not spec.decoders:
        raise CliError(f"model {name!r} is not a prior (its registry entry names no decoders)")
    return next((d for d in spec.decoders if weights_cached(d, cache_dir)), spec.decoders[-1])


def note_unseen_words(name: str, prompts: List[str]) -> None:
    """`text-small` learnt a toy vocabulary: name the words of each prompt its training captions never
    used (such words pull little or at random on what it draws; see model_cards/text-small.md)."""
    if name != SMALL["text"]:
        return
    from shap_e.data.captions import training_vocabulary, words

    vocabulary = training_vocabulary()
    for prompt in prompts:
        unseen = sorted(words(prompt) - vocabulary)
        if unseen:
            listed = ", ".join(unseen[:8]) + (f" and {len(unseen) - 8} more" if len(unseen) > 8 else "")
            say(f"note: {name} never saw {listed} in training (prompt {shorten(prompt)!r}); it knows twelve "
                "object kinds and twelve colours, see model_cards/text-small.md")


def load_pipeline(name: str, decoder: str, device: torch.device, cache_dir) -> Dict[str, Any]:
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config, load_model
    from shap_e.models.registry import get_spec

    t0 = time.perf_counter()
    prior = load_model(name, device=device, cache_dir=cache_dir)
    xm = load_model(decoder, device=device, cache_dir=cache_dir)
    diffusion = diffusion_from_config(load_config(get_spec(name).diffusion))
    say(f"loaded {name} and {decoder} in {time.perf_counter() - t0:.1f} s")
    return {"prior": prior, "xm": xm, "diffusion": diffusion}


def generate_one(models, job: Job, folder: Path, request: Dict[str, Any], overwrite: bool, settings, device,
                 args) -> None:
    """Draw the sample of `request["seed"]` alone and write its folder."""
    from shap_e.diffusion.sample import regression_start, sample_latents

    t0 = time.perf_counter()
    latent = sample_latents(
        batch_size=1, model=models["prior"], diffusion=models["diffusion"], model_kwargs=job.conditions,
        guidance_scale=request["guidance"], clip_denoised=True, use_fp16=False, use_karras=True,
        karras_steps=settings.karras_steps, sigma_min=settings.sigma_min, sigma_max=settings.sigma_max,
        s_churn=settings.s_churn, device=device, progress=True, sampler=settings.sampler,
        generator=[torch.Generator().manual_seed(request["seed"])], dtype=DTYPES.get(args.dtype),
        guidance_max_sigma=request["guidance_max_sigma"],
        **regression_start(models["prior"], 1, job.conditions, request["init_strength"]),
    )[0]
    meta = {**request, "package_version": __version__, "seconds": {"sampling": round(time.perf_counter() - t0, 3)}}
    write_sample(models["xm"], latent, folder, meta, overwrite, args)
    say(f"wrote {folder}")


def write_sample(xm, latent: torch.Tensor, folder: Path, meta: Dict[str, Any], overwrite: bool, args) -> None:
    """The sample's folder, complete or not at all: latent, meshes, texture, turntables, meta.json last."""
    from shap_e.models.decode import decode_latent_mesh, latent_color_fn, turntable
    from shap_e.rendering.export import save_mesh, save_textured_glb
    from shap_e.util.animation import save_gif, save_mp4
    from shap_e.util.tensor_files import save_latent

    with atomic_directory(folder, overwrite=overwrite) as tmp:
        save_latent(tmp / "latent.pt", latent)
        t0 = time.perf_counter()
        mesh = decode_latent_mesh(xm, latent, grid_size=args.grid_size, vertex_placement=args.vertex_placement)
        meta["seconds"]["mesh"] = round(time.perf_counter() - t0, 3)
        empty = len(mesh.faces) == 0
        if empty:
            say(f"note: the mesh of {folder.name} is empty (the field has no surface in the box); its files hold "
                "no geometry" + (" and it has no texture" if args.texture else ""))
        for fmt in meta["formats"]:
            save_mesh(mesh, tmp / f"mesh.{fmt}", allow_empty=True)
        if args.texture and not empty:
            save_textured_glb(mesh, tmp / "mesh_textured.glb", latent_color_fn(xm, latent))
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
