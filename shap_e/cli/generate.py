"""`shap-e text` and `shap-e image`: sample latents, then write meshes, turntables and meta.json.

`plan_generation` and `generate_all` are the command's two halves (check and read the inputs; sample
and write); the web app (`shap-e app`) runs the same two with its models loaded once.
"""
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from shap_e import __version__
from shap_e.cli.common import (
    CliError,
    DTYPES,
    add_guidance_max_sigma_option,
    add_init_latent_option,
    add_init_strength_option,
    add_sample_output_options,
    check_sample_output,
    choose_model,
    load_latent,
    parse_formats,
    pick_device,
    resolve_guidance_max_sigma,
    resolve_init_strength,
    say,
    write_sample,
)
from shap_e.diffusion.presets import PRESETS
from shap_e.util.distributed import process_group, rank_share

SAMPLERS = ("heun", "euler", "euler_ancestral", "dpmpp_2m")
SMALL = {"text": "text-small", "image": "image-small"}
OFFICIAL = {"text": "text300M", "image": "image300M"}
DEFAULT_GUIDANCE = {"text": 15.0, "image": 3.0}
StepCallback = Optional[Callable[[Dict[str, Any]], None]]


@dataclass
class Plan:
    """What one `shap-e text`/`image` call draws, read and checked before any model is loaded.

    `jobs`: (label, model_kwargs) per prompt or picture, each drawn `--batch` times; `notes`: lines
    for the user (prompt words the model never saw); `init_latent`: the `--init-latent` `[d_latent]`.
    """

    jobs: List[Tuple[str, Dict[str, Any]]]
    formats: List[str]
    model: str
    notes: List[str]
    init_latent: Optional[torch.Tensor] = None


def add_commands(commands) -> None:
    text = commands.add_parser("text", help="text -> 3D", description="Generate 3D models from a prompt.")
    text.add_argument("prompt", nargs="?", help="what to generate, e.g. 'a red chair'")
    text.add_argument("--prompts", help="a file with one prompt per line (bulk; split across torchrun ranks)")
    image = commands.add_parser("image", help="image -> 3D", description="Generate 3D models from a picture.")
    image.add_argument("image", help="a picture of one object (PNG, JPEG, ...); transparent pixels become white")
    for parser, kind in ((text, "text"), (image, "image")):
        add_sampling_options(parser, kind)
        add_init_strength_option(parser)
        add_init_latent_option(parser)
        parser.set_defaults(run=run_generate, kind=kind)


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
    add_sample_output_options(parser)
    parser.add_argument("--cache-dir", help="model cache (default: $SHAP_E_CACHE or ~/.cache/shap_e)")


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
    """The picture at `path` as an RGB PIL image; transparent pixels become white, the background
    the bundled image prior was trained on."""
    from PIL import UnidentifiedImageError

    from shap_e.util.image_util import load_image, remove_alpha

    try:
        return remove_alpha(load_image(path), mode="white").convert("RGB")
    except FileNotFoundError as e:
        raise CliError(f"image {path!r} does not exist") from e
    except (UnidentifiedImageError, OSError) as e:
        raise CliError(f"{path!r} is not an image Pillow can read") from e


def validate(args) -> None:
    if args.batch < 1:
        raise CliError("--batch must be at least 1")
    if args.steps is not None and args.steps < 2:
        raise CliError("--steps must be at least 2")
    check_sample_output(args)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "sample"


def run_generate(args) -> None:
    plan = plan_generation(args)
    for note in plan.notes:
        say(note)
    with process_group():  # under torchrun: every rank loads the models, then draws its share of the jobs
        device = pick_device(args.device)
        models = load_pipeline(plan.model, device, args.cache_dir)
        generate_all(models, plan, rank_share(plan.jobs), device, args)


def plan_generation(args) -> Plan:
    """Check `args`, read the prompts or the picture and the start latent, and choose the model."""
    validate(args)
    formats = parse_formats(args.format)
    if args.kind == "text":
        jobs = [(p, {"texts": [p] * args.batch}) for p in read_prompts(args)]
    else:
        image = read_image(args.image)
        jobs = [(Path(args.image).name, {"images": [image] * args.batch})]
    init_latent = load_latent(args.init_latent) if args.init_latent else None
    name = choose_model(args.model, OFFICIAL[args.kind], SMALL[args.kind], args.cache_dir)
    notes = unseen_word_notes(name, [label for label, _ in jobs]) if args.kind == "text" else []
    return Plan(jobs, formats, name, notes, init_latent)


def unseen_word_notes(name: str, prompts: List[str]) -> List[str]:
    """`text-small` learnt a toy vocabulary: one line per prompt that uses words its training captions
    never used (such words pull little or at random on what it draws; see model_cards/text-small.md)."""
    if name != SMALL["text"]:
        return []
    from shap_e.data.captions import training_vocabulary, words

    vocabulary = training_vocabulary()
    notes = []
    for prompt in prompts:
        unseen = sorted(words(prompt) - vocabulary)
        if unseen:
            notes.append(f"note: {name} never saw {', '.join(unseen)} in training (prompt {prompt!r}); it knows "
                         "twelve object kinds and twelve colours, see model_cards/text-small.md")
    return notes


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


def generate_all(models, plan: Plan, jobs: Iterable[Tuple[str, Dict[str, Any]]], device, args,
                 callback: StepCallback = None) -> List[Path]:
    """Fill in the model's recommended settings left open in `args`, then draw and write every job;
    returns the sample folders. `callback` sees every sampler step (see `sample_latents`)."""
    if args.guidance is None:
        args.guidance = models["guidance_scale"] or DEFAULT_GUIDANCE[args.kind]
    args.guidance_max_sigma = resolve_guidance_max_sigma(args.guidance_max_sigma, models["guidance_max_sigma"])
    args.init_strength = resolve_init_strength(args.init_strength, models["init_strength"], models["prior"],
                                               plan.model, from_latent=plan.init_latent is not None)
    return [folder for label, model_kwargs in jobs
            for folder in generate_one(models, plan, label, model_kwargs, device, args, callback)]


def sampling_start(prior, plan: Plan, model_kwargs: Dict[str, Any], args) -> Dict[str, Any]:
    """`sample_latents` keyword arguments for where sampling starts: `--init-latent` at
    `--init-strength`, else the prior's own regressed latent, else noise (`{}`)."""
    from shap_e.diffusion.sample import regression_start

    if plan.init_latent is not None:
        return {"init_latent": plan.init_latent, "strength": args.init_strength}
    return regression_start(prior, args.batch, model_kwargs, args.init_strength)


def generate_one(models, plan: Plan, label, model_kwargs, device, args, callback: StepCallback = None) -> List[Path]:
    from shap_e.diffusion.presets import resolve_preset
    from shap_e.diffusion.sample import sample_latents

    settings = resolve_preset(args.preset, sampler=args.sampler, karras_steps=args.steps)
    generators = [torch.Generator().manual_seed(args.seed + i) for i in range(args.batch)]
    t0 = time.perf_counter()
    latents = sample_latents(
        batch_size=args.batch, model=models["prior"], diffusion=models["diffusion"],
        model_kwargs=model_kwargs, guidance_scale=args.guidance, clip_denoised=True, use_fp16=False,
        use_karras=True, karras_steps=settings.karras_steps, sigma_min=settings.sigma_min,
        sigma_max=settings.sigma_max, s_churn=settings.s_churn, device=device, progress=True,
        sampler=settings.sampler, generator=generators, dtype=DTYPES.get(args.dtype),
        guidance_max_sigma=args.guidance_max_sigma, callback=callback,
        **sampling_start(models["prior"], plan, model_kwargs, args),
    )
    sample_seconds = time.perf_counter() - t0
    folders = []
    for i, latent in enumerate(latents):
        meta = {
            "prompt" if args.kind == "text" else "image": label, "model": plan.model, "decoder": models["decoder"],
            "seed": args.seed + i, "preset": settings.name, "sampler": settings.sampler,
            "steps": settings.karras_steps, "guidance": args.guidance, "guidance_max_sigma": args.guidance_max_sigma,
            "init_strength": args.init_strength,
            **({"init_latent": Path(args.init_latent).name} if plan.init_latent is not None else {}),
            "grid_size": args.grid_size, "package_version": __version__,
            "seconds": {"sampling_batch": round(sample_seconds, 3)},
        }
        folder = Path(args.output) / f"{slug(label)}_seed{args.seed + i}"
        write_sample(models["xm"], latent, folder, plan.formats, meta, args)
        say(f"wrote {folder}")
        folders.append(folder)
    return folders
