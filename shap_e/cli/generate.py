"""`shap-e text` and `shap-e image`: sample latents, then write meshes, turntables and meta.json."""
import json
import re
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
    atomic_directory,
    choose_model,
    pick_device,
    resolve_guidance_max_sigma,
    resolve_init_strength,
    say,
)
from shap_e.diffusion.presets import PRESETS
from shap_e.util.distributed import process_group, rank_share

FORMATS = ("glb", "ply", "obj")
SAMPLERS = ("heun", "euler", "euler_ancestral", "dpmpp_2m")
SMALL = {"text": "text-small", "image": "image-small"}
OFFICIAL = {"text": "text300M", "image": "image300M"}
DEFAULT_GUIDANCE = {"text": 15.0, "image": 3.0}


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
    parser.add_argument("--model", help=f"registry name (default: {OFFICIAL[kind]} if cached, else {SMALL[kind]})")
    parser.add_argument("--batch", type=int, default=1, help="samples per prompt")
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
        raise CliError(f"--format {value!r}: use a comma-separated list of {', '.join(FORMATS)}")
    return formats


def read_prompts(args) -> List[str]:
    if args.prompts:
        path = Path(args.prompts)
        if not path.is_file():
            raise CliError(f"--prompts file {str(path)!r} does not exist")
        prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    else:
        prompts = [args.prompt.strip()] if args.prompt and args.prompt.strip() else []
    if not prompts:
        raise CliError("the prompt is empty; pass a description such as 'a red chair'")
    return prompts


def read_image(path: str):
    from PIL import UnidentifiedImageError

    from shap_e.util.image_util import load_image

    try:
        return load_image(path).convert("RGB")
    except FileNotFoundError as e:
        raise CliError(f"image {path!r} does not exist") from e
    except (UnidentifiedImageError, OSError) as e:
        raise CliError(f"{path!r} is not an image Pillow can read") from e


def validate(args) -> None:
    if args.batch < 1:
        raise CliError("--batch must be at least 1")
    if args.steps is not None and args.steps < 2:
        raise CliError("--steps must be at least 2")
    if args.grid_size < 8:
        raise CliError("--grid-size must be at least 8")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "sample"


def run_generate(args) -> None:
    validate(args)
    formats = parse_formats(args.format)
    if args.kind == "text":
        jobs = [(p, {"texts": [p] * args.batch}) for p in read_prompts(args)]
    else:
        image = read_image(args.image)
        jobs = [(Path(args.image).name, {"images": [image] * args.batch})]
    name = choose_model(args.model, OFFICIAL[args.kind], SMALL[args.kind], args.cache_dir)
    if args.kind == "text":
        note_unseen_words(name, [label for label, _ in jobs])
    with process_group():  # under torchrun: every rank loads the models, then draws its share of the jobs
        device = pick_device(args.device)
        models = load_pipeline(name, device, args.cache_dir)
        if args.guidance is None:
            args.guidance = models["guidance_scale"] or DEFAULT_GUIDANCE[args.kind]
        args.guidance_max_sigma = resolve_guidance_max_sigma(args.guidance_max_sigma, models["guidance_max_sigma"])
        args.init_strength = resolve_init_strength(getattr(args, "init_strength", None), models["init_strength"],
                                                   models["prior"], name)
        for label, model_kwargs in rank_share(jobs):
            generate_one(models, name, label, model_kwargs, formats, device, args)


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
            say(f"note: {name} never saw {', '.join(unseen)} in training (prompt {prompt!r}); it knows twelve "
                "object kinds and twelve colours, see model_cards/text-small.md")


def load_pipeline(name: str, device: torch.device, cache_dir) -> Dict[str, Any]:
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config, load_model, weights_cached
    from shap_e.models.registry import get_spec

    spec = get_spec(name)
    if not spec.decoders:
        raise CliError(f"model {name!r} is not a prior (its registry entry names no decoders)")
    # The first decoder whose weights are cached, else the last (downloaded on load).
    decoder = next((d for d in spec.decoders if weights_cached(d, cache_dir)), spec.decoders[-1])
    t0 = time.perf_counter()
    prior = load_model(name, device=device, cache_dir=cache_dir)
    xm = load_model(decoder, device=device, cache_dir=cache_dir)
    diffusion = diffusion_from_config(load_config(spec.diffusion))
    say(f"loaded {name} and {decoder} in {time.perf_counter() - t0:.1f} s")
    return {"prior": prior, "xm": xm, "diffusion": diffusion, "decoder": decoder, "guidance_scale": spec.guidance_scale,
            "guidance_max_sigma": spec.guidance_max_sigma, "init_strength": spec.init_strength}


def generate_one(models, name, label, model_kwargs, formats, device, args) -> None:
    from shap_e.diffusion.presets import resolve_preset
    from shap_e.diffusion.sample import regression_start, sample_latents

    settings = resolve_preset(args.preset, sampler=args.sampler, karras_steps=args.steps)
    generators = [torch.Generator().manual_seed(args.seed + i) for i in range(args.batch)]
    t0 = time.perf_counter()
    latents = sample_latents(
        batch_size=args.batch, model=models["prior"], diffusion=models["diffusion"],
        model_kwargs=model_kwargs, guidance_scale=args.guidance, clip_denoised=True, use_fp16=False,
        use_karras=True, karras_steps=settings.karras_steps, sigma_min=settings.sigma_min,
        sigma_max=settings.sigma_max, s_churn=settings.s_churn, device=device, progress=True,
        sampler=settings.sampler, generator=generators, dtype=DTYPES.get(args.dtype),
        guidance_max_sigma=args.guidance_max_sigma,
        **regression_start(models["prior"], args.batch, model_kwargs, args.init_strength),
    )
    sample_seconds = time.perf_counter() - t0
    for i, latent in enumerate(latents):
        meta = {
            "prompt" if args.kind == "text" else "image": label, "model": name, "decoder": models["decoder"],
            "seed": args.seed + i, "preset": settings.name, "sampler": settings.sampler,
            "steps": settings.karras_steps, "guidance": args.guidance, "guidance_max_sigma": args.guidance_max_sigma,
            "init_strength": args.init_strength,
            "grid_size": args.grid_size, "package_version": __version__,
            "seconds": {"sampling_batch": round(sample_seconds, 3)},
        }
        folder = Path(args.output) / f"{slug(label)}_seed{args.seed + i}"
        write_sample(models["xm"], latent, folder, formats, meta, args)
        say(f"wrote {folder}")


def write_sample(xm, latent: torch.Tensor, folder: Path, formats, meta: Dict[str, Any], args) -> None:
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
