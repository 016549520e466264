"""`shap-e text` and `shap-e image`: read and check the request, plan the output folders, then draw.

Everything the user gave is checked, and the output folders planned, before any model is loaded
(`plan_generation`); then `shap_e.cli.pipeline.generate_all` samples and writes. The web app
(`shap-e app`) runs the same two with its models loaded once. Each sample is drawn alone from its own
seed (`--batch N` draws seeds seed .. seed + N - 1 one after another), so sample i of a batch is bit
for bit the sample of seed + i drawn alone.
"""
import hashlib
from pathlib import Path
from typing import Any, Dict, List

import torch

from shap_e.cli.common import (
    CliError,
    DTYPES,
    add_guidance_max_sigma_option,
    add_init_latent_option,
    add_init_strength_option,
    add_sample_output_options,
    check_guidance,
    check_sample_output,
    check_seed,
    choose_model,
    parse_formats,
    pick_device,
    prepare_output_folder,
    resolve_guidance_max_sigma,
    resolve_init_strength,
    say,
)
from shap_e.cli.pipeline import Plan, Sample, generate_all, load_pipeline, pick_decoder
from shap_e.cli.samples import Job, existing_state, plan_folders
from shap_e.diffusion.presets import PRESETS
from shap_e.util.checks import check_int, shorten
from shap_e.util.distributed import process_group, rank_share

SAMPLERS = ("heun", "euler", "euler_ancestral", "dpmpp_2m")
SMALL = {"text": "text-small", "image": "image-small"}
OFFICIAL = {"text": "text300M", "image": "image300M"}
DEFAULT_GUIDANCE = {"text": 15.0, "image": 3.0}
MAX_BATCH = 10_000  # samples per prompt
PATH_SHOWN = 240  # characters of a picture's path quoted in a message (the web app shows its file name)
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
    parser.add_argument("--precision", choices=("float32", "int8"), default="float32",
                        help="int8: the prior's transformer layers in int8 on the CPU (faster, approximate; "
                        "see docs/performance.md)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="replay each prior evaluation from CUDA graphs (torch.compile reduce-overhead; "
                        "CUDA only, the first steps compile)")
    add_sample_output_options(parser)
    parser.add_argument("--cache-dir", help="model cache (default: $SHAP_E_CACHE or ~/.cache/shap_e)")


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
    """The picture at `path` as an RGB PIL image; transparent pixels become white, the background
    the bundled image prior was trained on."""
    from PIL import Image, UnidentifiedImageError

    from shap_e.util.image_util import load_image, remove_alpha

    try:
        return remove_alpha(load_image(path), mode="white").convert("RGB")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        raise CliError(f"image {shorten(path, PATH_SHOWN)!r} does not exist") from e
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise CliError(f"{shorten(path, PATH_SHOWN)!r} is not an image Pillow can read") from e


def validate(args) -> None:
    """Every option that needs no model, checked before anything is loaded."""
    from shap_e.diffusion.checks import MAX_STEPS

    check_int(args.batch, "--batch", 1, MAX_BATCH)
    check_seed(args.seed, args.batch)
    if args.steps is not None:
        check_int(args.steps, "--steps", 2, MAX_STEPS)
    if args.guidance is not None:
        check_guidance(args.guidance)
    if args.precision == "int8" and args.dtype not in (None, "float32"):
        raise CliError(f"--precision int8 computes around its int8 products in float32; drop --dtype {args.dtype}")
    check_sample_output(args)


def read_jobs(args) -> List[Job]:
    if args.kind == "text":
        return [Job(p, p, {"texts": [p]}) for p in read_prompts(args)]
    image = read_image(args.image)
    digest = hashlib.sha256(image.tobytes()).hexdigest()
    return [Job(Path(args.image).name, digest, {"images": [image]})]


def run_generate(args) -> None:
    plan = plan_generation(args)
    for note in plan.notes:
        say(note)
    if not plan.jobs:
        say("nothing to generate: every sample is already in the output folder")
        return
    with process_group():  # under torchrun: every rank loads the models, then draws its share of the samples
        device = pick_device(args.device)
        check_precision_option(args.precision, device)
        fetch_weights(plan.decoder, args.cache_dir)
        pipeline = load_pipeline(plan.model, device, args.cache_dir, plan.decoder, args.precision)
        generate_all(pipeline, plan, rank_share(plan.jobs), device, args, release=True)


def check_precision_option(precision: str, device: torch.device) -> None:
    """`--precision int8` needs the CPU."""
    from shap_e.models.quantize import check_precision

    try:
        check_precision(precision, device, "--precision")
    except ValueError as error:
        raise CliError(str(error)) from None


def fetch_weights(name: str, cache_dir) -> None:
    """Download `name`'s weights into the cache now unless they are there (or bundled): a missing
    network then fails before sampling, not after it; the model itself is loaded when needed."""
    from shap_e.models.download import ChecksumError, DownloadError, fetch_file_cached, weights_cached
    from shap_e.models.registry import get_spec

    spec = get_spec(name)
    if spec.url is not None and not weights_cached(name, cache_dir):
        try:
            fetch_file_cached(spec.url, cache_dir=cache_dir, sha256=spec.sha256)
        except (DownloadError, ChecksumError) as error:
            raise CliError(f"the decoder {name!r} is needed and not cached: {error}") from None


def plan_generation(args) -> Plan:
    """Check `args`, read the prompts or the picture and the start latent, choose the models and plan
    the sample folders (those that already hold their sample are kept and left out of the plan)."""
    from shap_e.diffusion.presets import resolve_preset
    from shap_e.models.registry import get_spec
    from shap_e.util.tensor_files import load_latent

    validate(args)
    formats = parse_formats(args.format)
    jobs = read_jobs(args)
    init_latent = load_latent(args.init_latent) if args.init_latent else None
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
        "init_strength": resolve_init_strength(args.init_strength, spec.init_strength, None, name,
                                               from_latent=init_latent is not None),
        **(_init_latent_record(args.init_latent, init_latent) if init_latent is not None else {}),
        "dtype": args.dtype, "precision": args.precision, "grid_size": args.grid_size,
        "vertex_placement": args.vertex_placement, "max_faces": args.max_faces, "formats": formats, "texture": args.texture,
        "texture_size": args.texture_size if args.texture else None, "gif": args.gif, "mp4": args.mp4,
        "render_mode": args.render_mode if args.gif or args.mp4 else None,
        "render_size": args.render_size if args.gif or args.mp4 else None,
    }
    notes = unseen_word_notes(name, [job.label for job in jobs]) if args.kind == "text" else []
    return Plan(plan_samples(jobs, request, args), name, decoder, settings, notes, init_latent)


def _init_latent_record(path: str, latent: torch.Tensor) -> Dict[str, Any]:
    """What meta.json records of `--init-latent`: its file name and the sha256 of its numbers."""
    digest = hashlib.sha256(latent.detach().cpu().float().numpy().tobytes()).hexdigest()
    return {"init_latent": Path(path).name, "init_latent_sha256": digest}


def plan_samples(jobs: List[Job], request: Dict[str, Any], args) -> List[Sample]:
    """Every sample still to write; says which are kept."""
    output = prepare_output_folder(args.output)
    seeds = list(range(args.seed, args.seed + args.batch))
    label_field = "prompt" if args.kind == "text" else "image"
    samples = []
    for job in plan_folders(jobs, output, seeds, label_field):
        for seed in seeds:
            folder = output / f"{job.folder_stem}_seed{seed}"
            sample_request = {label_field: job.label, **({"image_sha256": job.key} if args.kind == "image" else {}),
                              "seed": seed, **request}
            state = existing_state(folder, sample_request, args.overwrite)
            if state == "kept":
                say(f"kept {folder} (it already holds this sample)")
            else:
                samples.append(Sample(job, folder, sample_request, replace=state == "replace"))
    return samples


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
            listed = ", ".join(unseen[:8]) + (f" and {len(unseen) - 8} more" if len(unseen) > 8 else "")
            notes.append(f"note: {name} never saw {listed} in training (prompt {shorten(prompt)!r}); it knows "
                         "twelve object kinds and twelve colours, see model_cards/text-small.md")
    return notes
