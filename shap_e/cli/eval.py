"""`shap-e eval reconstruction|text|image|classifier`: score models on held-out procedural data.

`--set validation` runs the draws every setting is chosen on, `--set test` the draws that are only
evaluated to report (docs/evaluation.md); `--seed S` one ad-hoc draw of -n items. Results go to a JSON
file under `--out-dir` (default `runs/eval/`) with a Markdown table beside it; each metric carries its
95 % interval. Finished draws are kept under `<out-dir>/draws/`, so an interrupted run resumes.
"""
import hashlib
import json
from dataclasses import replace
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
# The task name each command's result carries.
_RESULT_TASKS = {"reconstruction": "reconstruction", "text": "text_to_3d", "image": "image_to_3d",
                 "classifier": "ground_truth"}
SPLITS = ("heldout_pairs", "heldout_paraphrases", "train")
REFERENCES = ("ground-truth", "decoded", "both")
DEFAULT_OUT_DIR = "runs/eval"
# The flag of each `EvalSettings` field, so that a bad value is reported by the name the user typed.
_FLAGS = {"steps": "--steps", "batch_size": "--batch", "grid_size": "--grid-size", "resolution": "--resolution",
          "refine_steps": "--refine-steps", "init_strength": "--init-strength",
          "guidance_max_sigma": "--guidance-max-sigma", "vertex_placement": "--vertex-placement"}


def add_commands(commands) -> None:
    from shap_e.eval.sets import DRAW_SIZE, EVAL_SETS

    parser = commands.add_parser("eval", help="score a model on held-out data", description=__doc__)
    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    for task, text in TASKS.items():
        sub = tasks.add_parser(task, help=text, description=text)
        sub.add_argument("--model", help="registry name (default: transmitter / text300M / image300M)")
        sub.add_argument("--decoder", help="registry name of the decoder (default: the prior's first decoder)")
        draws = sub.add_mutually_exclusive_group()
        draws.add_argument("--set", choices=tuple(EVAL_SETS), dest="eval_set",
                           help="a fixed set of draws of 48 items: validation (choose settings on it) or test "
                                "(report it); see docs/evaluation.md")
        draws.add_argument("--seed", type=int, help="one ad-hoc draw: its dataset seed (default 0); item i samples "
                                                    "with seed + i")
        sub.add_argument("-n", type=int, help=f"items of an ad-hoc draw (default {DRAW_SIZE}; a --set fixes it)")
        sub.add_argument("--split", choices=SPLITS, default="heldout_pairs", help="dataset split to draw from")
        sub.add_argument("--out-dir", default=DEFAULT_OUT_DIR,
                         help="folder of the results and of the finished draws (default: %(default)s)")
        sub.add_argument("-o", "--output", help="JSON file (a .md goes beside it; default: in --out-dir)")
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


def _eval_set(args):
    """The draws to run: the named set, or one ad-hoc draw of -n items at --seed."""
    from shap_e.eval.sets import DRAW_SIZE, EVAL_SETS, EvalSet

    if args.eval_set is not None:
        if args.n is not None:
            raise CliError(f"-n cannot be combined with --set: the {args.eval_set} set fixes {DRAW_SIZE} items a draw")
        return EVAL_SETS[args.eval_set]
    return EvalSet(None, (args.seed or 0,), args.n or DRAW_SIZE)


def _settings(args, spec):
    """`EvalSettings` from the flags and the model's recommended values, each checked before any model loads."""
    from shap_e.eval.settings import EvalSettings

    guidance = args.guidance if args.guidance is not None else getattr(spec, "guidance_scale", None)
    init = getattr(args, "init_strength", None)
    try:
        return EvalSettings(
            guidance_scale=guidance, steps=args.steps, batch_size=args.batch, grid_size=args.grid_size,
            resolution=args.resolution, refine_steps=args.refine_steps, vertex_placement=args.vertex_placement,
            guidance_max_sigma=resolve_guidance_max_sigma(getattr(args, "guidance_max_sigma", None),
                                                          getattr(spec, "guidance_max_sigma", None)),
            init_strength=init if init is not None else (getattr(spec, "init_strength", None) or 1.0),
        )
    except ValueError as error:
        field = str(error).split(" ")[0].split("=")[0]
        raise CliError(str(error).replace(field, _FLAGS.get(field, field), 1)) from None


def _validate(args) -> None:
    from shap_e.cli.common import check_guidance, check_seed
    from shap_e.diffusion.checks import MAX_STEPS
    from shap_e.models.decode import check_mesh_memory
    from shap_e.eval.sets import DRAW_SIZE
    from shap_e.util.checks import check_int

    if args.n is not None:
        check_int(args.n, "-n", 1, 100_000)
    check_mesh_memory(args.grid_size, "--grid-size")
    check_int(args.resolution, "--resolution", 8, 1024)
    check_int(args.steps, "--steps", 2, MAX_STEPS)
    check_int(args.batch, "--batch", 1, 10_000)
    check_int(args.refine_steps, "--refine-steps", 0, 100_000)
    if args.seed is not None:
        check_seed(args.seed, args.n or DRAW_SIZE)
    if args.guidance is not None:
        check_guidance(args.guidance)
    if args.output and not args.output.lower().endswith(".json"):
        raise CliError(f"--output must end in .json, got {args.output!r}")
    if args.task == "classifier" and args.references != "ground-truth" and not args.decoder:
        raise CliError(f"--references {args.references} needs --decoder (the transmitter whose reconstructions join "
                       "the references)")


def _default_model(task: str) -> str:
    return {"reconstruction": "transmitter", "text": "text300M", "image": "image300M"}.get(task, "ground-truth")


def _output_stem(args, model_name: str, eval_set) -> str:
    """`<model>_<task>_<split>_<set or seedS>[_<references>]`."""
    which = eval_set.name or f"seed{eval_set.dataset_seeds[0]}"
    references = "" if args.references == "ground-truth" else f"_{args.references}"
    return f"{model_name}_{args.task}_{args.split}_{which}{references}"


def run_eval(args) -> None:
    from shap_e.eval import report, sets
    from shap_e.models.registry import get_spec

    _validate(args)
    model_name = args.model or _default_model(args.task)
    eval_set = _eval_set(args)
    settings = _settings(args, get_spec(model_name) if args.task in ("text", "image") else None)
    stem = _output_stem(args, model_name, eval_set)
    output = Path(args.output) if args.output else Path(args.out_dir) / f"{stem}.json"
    evaluate_draw, settings = _draw_evaluation(args, model_name, settings)
    identity = dict(task=args.task, model=model_name, split=args.split, references=args.references,
                    settings=settings.record(_RESULT_TASKS[args.task]), **_weights_used(args, model_name))
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    result = sets.evaluate_draws(evaluate_draw, eval_set, cache_dir=Path(args.out_dir) / "draws" / f"{stem}-{key}",
                                 identity=identity, progress=True)
    result["settings"].update(model=model_name, split=args.split, references=args.references,
                              **_weights_used(args, model_name))
    title = f"shap-e eval {args.task}: {model_name}, {args.split}, " + (
        f"{eval_set.name} set" if eval_set.name else f"dataset seed {eval_set.dataset_seeds[0]}")
    json_path, md_path = report.write_results(result, output, title=title)
    say(_summary_line(result) + f"\nwrote {json_path} and {md_path}")


def _summary_line(result) -> str:
    parts = []
    for key, value in result["summary"].items():
        interval = result["intervals"].get(key)
        parts.append(f"{key}={value}" + (f" [{interval['low']}, {interval['high']}]" if interval else ""))
    return ", ".join(parts)


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
    """The `Judges` for `--references`, built once for every draw: the ground-truth references, or those
    plus the decoded ones (`decoded`), or both judges side by side (`both`: ground truth first)."""
    from shap_e.eval.classify import build_classifier
    from shap_e.eval.settings import Judges

    if args.references == "ground-truth":
        return Judges().built()
    say("building the classifier's decoded references (120 encodings)")
    decoded = build_classifier(transmitter=xm, grid_size=args.grid_size, vertex_placement=args.vertex_placement)
    if args.references == "decoded":
        return Judges(decoded)
    return Judges(extra={"decoded": decoded}).built()


def _draw_evaluation(args, model_name: str, settings):
    """(evaluate_draw(dataset_seed, n) -> one draw's result, the settings with the model's init_strength checked)."""
    from shap_e.data import iter_dataset
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.eval import run
    from shap_e.models.download import load_config
    from shap_e.models.registry import get_spec

    if args.task == "classifier":
        xm = _load(args.decoder, pick_device(args.device), args) if args.references != "ground-truth" else None
        judges = _judges(args, xm)
        return (lambda seed, n: run.evaluate_ground_truth(args.split, n, seed, judges)), settings
    device = pick_device(args.device)
    model = _load(model_name, device, args)
    if args.task == "reconstruction":
        judges = _judges(args, model)
        return (lambda seed, n: run.evaluate_reconstruction(
            model, list(iter_dataset(args.split, n, seed)), replace(settings, seed=seed), judges=judges,
            device=device, progress=True)), settings
    spec = get_spec(model_name)
    xm = _load(_decoder_name(args, model_name), device, args)
    judges = _judges(args, xm)
    common = dict(judges=judges, diffusion=diffusion_from_config(load_config(spec.diffusion)), device=device,
                  progress=True)
    if args.task == "text":
        return (lambda seed, n: run.evaluate_text_to_3d(
            model, xm, run.heldout_prompts(args.split, n, seed), replace(settings, seed=seed), **common)), settings
    settings = replace(settings, init_strength=resolve_init_strength(
        getattr(args, "init_strength", None), spec.init_strength, model, model_name))
    return (lambda seed, n: run.evaluate_image_to_3d(
        model, xm, list(iter_dataset(args.split, n, seed)), replace(settings, seed=seed), **common)), settings
