"""`shap-e eval reconstruction|text|image|classifier`: score models on held-out procedural data.

Results go to a JSON file (default `model_cards/eval_<task>_<model>.json`) with a Markdown table beside it.
"""
from pathlib import Path

from shap_e.cli.common import (
    CliError,
    add_guidance_max_sigma_option,
    add_init_strength_option,
    add_vertex_placement_option,
    pick_device,
    resolve_guidance_max_sigma,
    resolve_init_strength,
    say,
)

TASKS = {
    "reconstruction": "encoder round trip: IoU, Chamfer distance, colour error",
    "text": "text -> 3D: category and colour accuracy on held-out prompts",
    "image": "image -> 3D: IoU against the pictured held-out shape",
    "classifier": "the judging classifier on ground-truth assets (the ceiling of any model)",
}
SPLITS = ("heldout_pairs", "heldout_paraphrases", "train")
REFERENCES = ("ground-truth", "decoded", "both")


def add_commands(commands) -> None:
    parser = commands.add_parser("eval", help="score a model on held-out data", description=__doc__)
    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    for task, text in TASKS.items():
        sub = tasks.add_parser(task, help=text, description=text)
        sub.add_argument("--model", help="registry name (default: transmitter / text300M / image300M)")
        sub.add_argument("--decoder", help="registry name of the decoder (default: the prior's first decoder)")
        sub.add_argument("-n", type=int, default=48, help="number of held-out items")
        sub.add_argument("--split", choices=SPLITS, default="heldout_pairs", help="dataset split to draw from")
        sub.add_argument("--seed", type=int, default=0, help="dataset seed; item i samples with seed + i")
        sub.add_argument("-o", "--output", help="JSON file (a .md goes beside it)")
        sub.add_argument("--grid-size", type=int, default=64, help="marching-cubes grid of decoded meshes")
        sub.add_argument("--resolution", type=int, default=64, help="IoU grid")
        sub.add_argument("--steps", type=int, default=64, help="sampler steps (text, image)")
        sub.add_argument("--guidance", type=float,
                         help="classifier-free guidance "
                              "(default: the model's recommended value, else 15 text, 3 image)")
        sub.add_argument("--batch", type=int, default=8, help="samples per sampler batch")
        sub.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
        sub.add_argument("--cache-dir", help="model cache")
        add_vertex_placement_option(sub)
        sub.add_argument("--refine-steps", type=int, default=0,
                         help="reconstruction: latent refinement steps against the asset after the encoder")
        sub.add_argument("--references", choices=REFERENCES, default="ground-truth",
                         help="the category classifier's references: the ground-truth shapes, or those plus "
                              "their reconstructions by the decoder, or both judges on the same meshes "
                              "(`category_correct` and `category_correct_decoded`; classifier task: needs --decoder)")
        if task in ("text", "image"):
            add_guidance_max_sigma_option(sub)
        if task == "image":
            add_init_strength_option(sub)
        sub.set_defaults(run=run_eval)


def _validate(args) -> None:
    from shap_e.cli.common import check_guidance, check_seed
    from shap_e.diffusion.checks import MAX_STEPS
    from shap_e.models.decode import check_mesh_memory
    from shap_e.util.checks import check_int

    check_int(args.n, "-n", 1, 100_000)
    check_mesh_memory(args.grid_size, "--grid-size")
    check_int(args.resolution, "--resolution", 8, 1024)
    check_int(args.steps, "--steps", 2, MAX_STEPS)
    check_int(args.batch, "--batch", 1, 10_000)
    check_int(args.refine_steps, "--refine-steps", 0, 100_000)
    check_seed(args.seed, args.n)
    if args.guidance is not None:
        check_guidance(args.guidance)
    if args.output and not args.output.lower().endswith(".json"):
        raise CliError(f"--output must end in .json, got {args.output!r}")
    if args.task == "classifier" and args.references != "ground-truth" and not args.decoder:
        raise CliError(f"--references {args.references} needs --decoder (the transmitter whose reconstructions join "
                       "the references)")


def _default_model(task: str) -> str:
    return {"reconstruction": "transmitter", "text": "text300M", "image": "image300M"}.get(task, "ground-truth")


def run_eval(args) -> None:
    from shap_e.eval import run

    _validate(args)
    model_name = args.model or _default_model(args.task)
    output = Path(args.output or f"model_cards/eval_{args.task}_{model_name}.json")
    if args.task == "classifier":
        judges = {}
        if args.references != "ground-truth":
            judges = _judges(args, _load(args.decoder, pick_device(args.device), args))
        result = run.evaluate_ground_truth(args.split, args.n, args.seed, **judges)
    else:
        result = _evaluate_model(args, model_name)
    result["settings"].update(model=model_name, split=args.split, references=args.references,
                              **_weights_used(args, model_name))
    json_path, md_path = run.write_results(result, output, title=f"shap-e eval {args.task}: {model_name}")
    summary = ", ".join(f"{k}={v}" for k, v in result["summary"].items())
    say(f"{summary}\nwrote {json_path} and {md_path}")


def _decoder_name(args, model_name: str) -> str:
    """The transmitter that decodes a prior's latents: `--decoder`, else the prior's first registered decoder."""
    from shap_e.models.registry import get_spec

    decoders = get_spec(model_name).decoders
    return args.decoder or (decoders[0] if decoders else "transmitter")


def _weights_used(args, model_name: str) -> dict:
    """The registry sha256 of every weights file the evaluation loaded (each verified at load), so that a
    result names the exact weights it scored: `model_sha256`, and `decoder` / `decoder_sha256` when a
    transmitter decodes or judges."""
    from shap_e.models.registry import get_spec

    used = {} if args.task == "classifier" else {"model_sha256": get_spec(model_name).sha256}
    if args.task in ("text", "image"):
        used["decoder"] = _decoder_name(args, model_name)
    elif args.task == "classifier" and args.decoder:
        used["decoder"] = args.decoder
    if "decoder" in used:
        used["decoder_sha256"] = get_spec(used["decoder"]).sha256
    return used


def _load(name: str, device, args):
    from shap_e.models.download import load_model

    return load_model(name, device=device, cache_dir=args.cache_dir).eval()


def _judges(args, xm):
    """The evaluation's `classifier` / `extra_classifiers` arguments for `--references` (none: the
    default, ground truth only). `both` judges with the ground truth first and adds the decoded judge."""
    from shap_e.eval.classify import build_classifier

    if args.references == "ground-truth":
        return {}
    say("building the classifier's decoded references (120 encodings)")
    decoded = build_classifier(transmitter=xm, grid_size=args.grid_size, vertex_placement=args.vertex_placement)
    if args.references == "decoded":
        return {"classifier": decoded}
    return {"extra_classifiers": {"decoded": decoded}}


def _evaluate_model(args, model_name: str):
    from shap_e.data import iter_dataset
    from shap_e.eval import run
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config
    from shap_e.models.registry import get_spec

    device = pick_device(args.device)
    model = _load(model_name, device, args)
    if args.task == "reconstruction":
        assets = list(iter_dataset(args.split, args.n, args.seed))
        return run.evaluate_reconstruction(model, assets, grid_size=args.grid_size, resolution=args.resolution,
                                           seed=args.seed, device=device, progress=True,
                                           refine_steps=args.refine_steps, vertex_placement=args.vertex_placement,
                                           **_judges(args, model))
    spec = get_spec(model_name)
    xm = _load(_decoder_name(args, model_name), device, args)
    options = dict(steps=args.steps, batch_size=args.batch, grid_size=args.grid_size, seed=args.seed,
                   device=device, progress=True, diffusion=diffusion_from_config(load_config(spec.diffusion)),
                   vertex_placement=args.vertex_placement, **_judges(args, xm))
    guidance = args.guidance if args.guidance is not None else spec.guidance_scale
    if guidance is not None:
        options["guidance_scale"] = guidance
    options["guidance_max_sigma"] = resolve_guidance_max_sigma(args.guidance_max_sigma, spec.guidance_max_sigma)
    if args.task == "text":
        prompts = run.heldout_prompts(args.split, args.n, args.seed)
        return run.evaluate_text_to_3d(model, xm, prompts, **options)
    options["init_strength"] = resolve_init_strength(args.init_strength, spec.init_strength, model, model_name)
    assets = list(iter_dataset(args.split, args.n, args.seed))
    return run.evaluate_image_to_3d(model, xm, assets, resolution=args.resolution, **options)
