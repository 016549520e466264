"""Evaluation runs: models in, a dict of metrics and per-item rows out, written as JSON + Markdown.

* `evaluate_reconstruction`: asset -> encoder -> latent -> mesh, against the asset (IoU, Chamfer,
  colour error, colour name).
* `evaluate_text_to_3d`: labelled held-out prompts -> prior -> mesh, judged by the classifier of
  `shap_e.eval.classify` (category and colour accuracy).
* `evaluate_image_to_3d`: a picture of a held-out asset -> prior -> mesh, against that asset (IoU in
  the world frame, plus category and colour).
* `evaluate_ground_truth`: the classifier on the ground-truth assets themselves, the ceiling of
  what any model can score with it.

Every mesh lives in the [-1, 1]^3 frame of decoded meshes: assets are normalised as `load_asset`
does (bounding-box centre at the origin, largest extent 2).
"""
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from shap_e.eval.classify import ShapeClassifier, build_classifier, dominant_color
from shap_e.eval.metrics import EvalMesh, chamfer_and_color, to_eval_mesh, volumetric_iou
from shap_e.util.atomic import write_atomic

__all__ = [
    "LabelledPrompt",
    "asset_mesh",
    "evaluate_ground_truth",
    "evaluate_image_to_3d",
    "evaluate_reconstruction",
    "evaluate_text_to_3d",
    "heldout_prompts",
    "markdown_report",
    "picture",
    "write_results",
]


@dataclass
class LabelledPrompt:
    """A prompt with the labels of the object it describes (primary colour for multi-part objects)."""

    prompt: str
    category: str
    colour: str


def heldout_prompts(split: str = "heldout_pairs", n: int = 48, seed: int = 0) -> List[LabelledPrompt]:
    """The captions of `n` assets of a dataset split (`heldout_pairs`: unseen (category, colour) pairs;
    `heldout_paraphrases`: unseen wordings) with their labels."""
    from shap_e.data import iter_dataset

    return [LabelledPrompt(a.caption, a.category, a.colours[0]) for a in iter_dataset(split, n, seed)]


def asset_mesh(asset: Any) -> EvalMesh:
    """A `ProceduralAsset` (or trimesh) as an `EvalMesh` normalised to [-1, 1]^3 like `load_asset`."""
    mesh = to_eval_mesh(getattr(asset, "mesh", asset))
    used = mesh.verts[mesh.faces.unique()]
    lo, hi = used.amin(dim=0), used.amax(dim=0)
    return EvalMesh((mesh.verts - (lo + hi) / 2) * (2 / float((hi - lo).max())), mesh.faces, mesh.face_colors)


def _judge(
    mesh: Any, category: str, colour: str, classifier: ShapeClassifier,
    extra_classifiers: Optional[Mapping[str, ShapeClassifier]] = None,
) -> Dict[str, Any]:
    """Category and colour of one mesh against its labels."""
    mesh = to_eval_mesh(mesh)
    predicted, score = classifier.classify(mesh) if not mesh.is_empty else (None, 0.0)
    name, share = dominant_color(mesh)
    return dict(
        category=category, colour=colour, pred_category=predicted, category_score=round(score, 4),
        pred_colour=name, colour_share=round(share, 4), category_correct=predicted == category,
        colour_correct=name == colour, n_faces=int(mesh.faces.shape[0]),
        **_extra_categories(mesh, category, extra_classifiers),
    )


def _extra_categories(
    mesh: EvalMesh, category: str, extra_classifiers: Optional[Mapping[str, ShapeClassifier]]
) -> Dict[str, Any]:
    """`pred_category_<name>` and `category_correct_<name>` of the mesh by each named extra classifier:
    one sampled mesh judged against several sets of references."""
    row: Dict[str, Any] = {}
    for name, classifier in (extra_classifiers or {}).items():
        predicted = _predicted_category(mesh, classifier)
        row[f"pred_category_{name}"] = predicted
        row[f"category_correct_{name}"] = predicted == category
    return row


def _predicted_category(mesh: EvalMesh, classifier: ShapeClassifier) -> Optional[str]:
    """The classifier's category of the mesh; None for an empty mesh."""
    return classifier.classify(mesh)[0] if not mesh.is_empty else None


def _extra_keys(extra_classifiers: Optional[Mapping[str, ShapeClassifier]]) -> Tuple[str, ...]:
    return tuple(f"category_correct_{name}" for name in (extra_classifiers or {}))


def _summary(rows: List[Dict[str, Any]], keys: Sequence[str]) -> Dict[str, Any]:
    """Means of the numeric/boolean `keys` over rows (None values skipped), plus counts."""
    out: Dict[str, Any] = {"n": len(rows), "n_empty": sum(r.get("n_faces", 1) == 0 for r in rows)}
    for key in keys:
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        out[key] = round(sum(values) / len(values), 4) if values else None
    return out


def _result(task: str, rows, keys, settings: Dict[str, Any], start: float) -> Dict[str, Any]:
    return {"task": task, "summary": _summary(rows, keys), "settings": settings, "rows": rows,
            "seconds": round(time.perf_counter() - start, 2)}


def _progress(items, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=not enabled)


def evaluate_ground_truth(
    split: str = "heldout_pairs", n: int = 120, seed: int = 0, classifier: Optional[ShapeClassifier] = None,
    extra_classifiers: Optional[Mapping[str, ShapeClassifier]] = None,
) -> Dict[str, Any]:
    """The classifier's category and colour accuracy on the ground-truth assets of a split.
    `extra_classifiers` as in `evaluate_text_to_3d`."""
    from shap_e.data import iter_dataset

    start = time.perf_counter()
    classifier = classifier or build_classifier()
    rows = [_judge(asset_mesh(a), a.category, a.colours[0], classifier, extra_classifiers)
            for a in iter_dataset(split, n, seed)]
    settings = dict(split=split, n=n, seed=seed, resolution=classifier.resolution, n_references=len(classifier.labels))
    keys = ("category_correct", "colour_correct") + _extra_keys(extra_classifiers)
    return _result("ground_truth", rows, keys, settings, start)


def evaluate_reconstruction(
    transmitter: torch.nn.Module,
    assets: Sequence[Any],
    *,
    grid_size: int = 64,
    resolution: int = 64,
    n_samples: int = 10000,
    seed: int = 0,
    device: Union[str, torch.device, None] = None,
    progress: bool = False,
    classifier: Optional[ShapeClassifier] = None,
    extra_classifiers: Optional[Mapping[str, ShapeClassifier]] = None,
    refine_steps: int = 0,
    vertex_placement: str = "reference",
) -> Dict[str, Any]:
    """Encode each `ProceduralAsset`, decode the latent to a mesh (marching cubes on a `grid_size`^3
    grid) and compare it with the asset: IoU on a `resolution`^3 grid, Chamfer distance and colour
    error from `n_samples` surface samples, whether the dominant colour keeps its name, and whether
    `classifier` (default: `build_classifier()`) still names the category, which bounds the category
    accuracy a prior decoding through this transmitter can score.

    refine_steps: `shap_e.encode`'s latent refinement against the asset (0: the encoder alone).
    extra_classifiers: as in `evaluate_text_to_3d`.
    vertex_placement: of the decoded meshes (`decode_latent_mesh`); "reference" shrinks them by
    (G - 1) / (G + 1), which alone caps the IoU at about 0.91 for G = 64."""
    from shap_e.encoding import round_trip
    from shap_e.encoding.assets import load_asset

    start, rows = time.perf_counter(), []
    device = torch.device(device) if device is not None else next(transmitter.parameters()).device
    classifier = classifier or build_classifier()
    with tempfile.TemporaryDirectory(prefix="shap_e_eval_") as tmp:
        for i, asset in enumerate(_progress(assets, progress, "reconstruction")):
            path = os.path.join(tmp, f"{i:06d}.ply")
            asset.mesh.export(path, file_type="ply")
            mesh = to_eval_mesh(round_trip(path, transmitter, grid_size, vertex_placement, seed + i, refine_steps,
                                           device))
            ref = to_eval_mesh(load_asset(path))
            name, _ = dominant_color(mesh)
            predicted = _predicted_category(mesh, classifier)
            row = dict(index=i, category=asset.category, colour=asset.colours[0], proportion=asset.proportion,
                       iou=round(volumetric_iou(mesh, ref, resolution), 4), colour_correct=name == asset.colours[0],
                       pred_category=predicted, category_correct=predicted == asset.category,
                       n_faces=int(mesh.faces.shape[0]), **_extra_categories(mesh, asset.category, extra_classifiers))
            row.update({k: None if v is None else round(v, 5)
                        for k, v in chamfer_and_color(mesh, ref, n_samples, seed + i).items()})
            rows.append(row)
    settings = dict(n=len(rows), grid_size=grid_size, resolution=resolution, n_samples=n_samples, seed=seed,
                    refine_steps=refine_steps, vertex_placement=vertex_placement)
    keys = ("iou", "chamfer", "color_error", "colour_correct", "category_correct") + _extra_keys(extra_classifiers)
    return _result("reconstruction", rows, keys, settings, start)


def _sample_meshes(
    prior, xm, model_kwargs_list: List[Dict[str, Any]], options: Dict[str, Any], progress: bool
) -> List[Any]:
    """One latent per entry of `model_kwargs_list` (each a batch of one), decoded to a `TorchMesh`."""
    from shap_e.diffusion.sample import regression_start, sample_latents
    from shap_e.models.decode import decode_latent_mesh

    device, seed, batch = options["device"], options["seed"], options["batch_size"]
    meshes = []
    for first in _progress(range(0, len(model_kwargs_list), batch), progress, "sampling"):
        chunk = model_kwargs_list[first:first + batch]
        kwargs = {key: [v for kw in chunk for v in kw[key]] for key in chunk[0]}
        generators = [torch.Generator().manual_seed(seed + first + k) for k in range(len(chunk))]
        init = regression_start(prior, len(chunk), kwargs, options.get("init_strength", 1.0))
        latents = sample_latents(
            batch_size=len(chunk), model=prior, diffusion=options["diffusion"], model_kwargs=kwargs,
            guidance_scale=options["guidance_scale"], clip_denoised=True, use_fp16=False, use_karras=True,
            karras_steps=options["steps"], sigma_min=1e-3, sigma_max=160.0, s_churn=0.0, device=device,
            sampler=options["sampler"], generator=generators,
            guidance_max_sigma=options["guidance_max_sigma"], **init,
        )
        meshes += [decode_latent_mesh(xm, latent, grid_size=options["grid_size"],
                                      vertex_placement=options["vertex_placement"]) for latent in latents]
    return meshes


def _options(
    prior, diffusion, guidance_scale, steps, batch_size, grid_size, seed, device, sampler, vertex_placement,
    guidance_max_sigma,
) -> Dict[str, Any]:
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.diffusion.presets import check_guidance_max_sigma
    from shap_e.models.download import load_config

    if steps < 2 or batch_size < 1 or grid_size < 8:
        raise ValueError(f"need steps >= 2, batch_size >= 1 and grid_size >= 8, got {steps}, {batch_size}, {grid_size}")
    check_guidance_max_sigma(guidance_max_sigma)  # before the classifier is built
    return dict(
        diffusion=diffusion if diffusion is not None else diffusion_from_config(load_config("diffusion")),
        guidance_scale=guidance_scale, guidance_max_sigma=guidance_max_sigma, steps=steps, batch_size=batch_size,
        grid_size=grid_size, seed=seed, sampler=sampler, vertex_placement=vertex_placement,
        device=torch.device(device) if device is not None else next(prior.parameters()).device,
    )


def evaluate_text_to_3d(
    prior: torch.nn.Module,
    xm: torch.nn.Module,
    prompts_with_labels: Sequence[LabelledPrompt],
    *,
    classifier: Optional[ShapeClassifier] = None,
    extra_classifiers: Optional[Mapping[str, ShapeClassifier]] = None,
    diffusion=None,
    guidance_scale: float = 15.0,
    guidance_max_sigma: Optional[float] = None,
    steps: int = 64,
    batch_size: int = 8,
    grid_size: int = 64,
    seed: int = 0,
    device: Union[str, torch.device, None] = None,
    sampler: str = "heun",
    progress: bool = False,
    vertex_placement: str = "reference",
) -> Dict[str, Any]:
    """Generate one mesh per labelled prompt (sample i uses seed + i) and judge its category and
    colour with `classifier` (default: `build_classifier()`). Prompts may also be
    `(prompt, category, colour)` tuples. `vertex_placement` as in `evaluate_reconstruction`;
    `guidance_max_sigma` as in `sample_latents` (None guides every step).

    extra_classifiers: more judges of the same meshes, by name (e.g. `{"decoded": ...}` for
        references decoded by a transmitter); each adds `pred_category_<name>` and
        `category_correct_<name>` to the rows and `category_correct_<name>` to the summary, so that
        one set of samples is scored against several sets of references."""
    start = time.perf_counter()
    prompts_with_labels = [p if isinstance(p, LabelledPrompt) else LabelledPrompt(*p) for p in prompts_with_labels]
    options = _options(
        prior, diffusion, guidance_scale, steps, batch_size, grid_size, seed, device, sampler, vertex_placement,
        guidance_max_sigma,
    )
    classifier = classifier or build_classifier()
    meshes = _sample_meshes(prior, xm, [{"texts": [p.prompt]} for p in prompts_with_labels], options, progress)
    rows = [dict(prompt=p.prompt, seed=seed + i, **_judge(m, p.category, p.colour, classifier, extra_classifiers),
                 **_heldout_words(p)) for i, (p, m) in enumerate(zip(prompts_with_labels, meshes))]
    settings = {k: v for k, v in options.items() if k not in ("diffusion", "device")}
    settings.update(n=len(rows), classifier_resolution=classifier.resolution)
    keys = ("category_correct", "colour_correct", "category_score") + _extra_keys(extra_classifiers)
    result = _result("text_to_3d", rows, keys, settings, start)
    result["summary"].update(_by_heldout_word(rows))
    return result


def _heldout_words(prompt: LabelledPrompt) -> Dict[str, bool]:
    """Row flags: the prompt names its category / colour with a synonym no training caption uses."""
    from shap_e.data.captions import names_heldout_synonym

    flags = names_heldout_synonym(prompt.prompt, prompt.category, prompt.colour)
    return {"heldout_category_word": flags["category"], "heldout_colour_word": flags["colour"]}


def _by_heldout_word(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Category and colour accuracy split by whether the prompt named them with a held-out synonym:
    a prior can only be right on those if its text encoder places the unseen word near the known ones."""
    out: Dict[str, Any] = {}
    for slot in ("category", "colour"):
        for heldout, label in ((True, "heldout_word"), (False, "training_word")):
            subset = _summary([r for r in rows if r[f"heldout_{slot}_word"] == heldout], [f"{slot}_correct"])
            out[f"n_{slot}_{label}"] = subset["n"]
            out[f"{slot}_correct_{label}"] = subset[f"{slot}_correct"]
    return out


def picture(asset: Any, size: int = 256, seed: int = 0):
    """The conditioning picture of an asset, as a PIL image: a photo-like render
    (`shap_e.train.condition_images`) from the +X side, 25 degrees above the horizon, on white;
    the view the small image prior was trained around, so that the object's yaw is visible."""
    from PIL import Image

    from shap_e.train.condition_images import render_condition_images
    from shap_e.encoding.assets import AssetMesh

    mesh = asset_mesh(asset)
    n_faces = mesh.faces.shape[0]
    colors = mesh.face_colors if mesh.face_colors is not None else torch.full((n_faces, 3), 0.8)
    asset_like = AssetMesh(
        verts=mesh.verts, faces=mesh.faces, corner_colors=colors[:, None].expand(n_faces, 3, 3).contiguous(),
        corner_uvs=torch.zeros(n_faces, 3, 2), face_texture=torch.full((n_faces,), -1), textures=[],
    )
    view = render_condition_images(asset_like, 1, size, seed=seed, elevation_deg=(25.0, 25.0),
                                   azimuth_deg=(0.0, 0.0))[0]
    pixels = ((view.permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return Image.fromarray(pixels.numpy())


def evaluate_image_to_3d(
    prior: torch.nn.Module,
    xm: torch.nn.Module,
    assets: Sequence[Any],
    *,
    image_fn: Callable[[Any], Any] = picture,
    classifier: Optional[ShapeClassifier] = None,
    extra_classifiers: Optional[Mapping[str, ShapeClassifier]] = None,
    diffusion=None,
    guidance_scale: float = 3.0,
    guidance_max_sigma: Optional[float] = None,
    steps: int = 64,
    batch_size: int = 8,
    grid_size: int = 64,
    resolution: int = 64,
    seed: int = 0,
    device: Union[str, torch.device, None] = None,
    sampler: str = "heun",
    progress: bool = False,
    vertex_placement: str = "reference",
    init_strength: float = 1.0,
) -> Dict[str, Any]:
    """Generate one mesh from `image_fn(asset)` (default `picture`) per asset and compare it with the
    pictured asset: IoU on a `resolution`^3 grid in the world frame, category and colour.
    `vertex_placement` as in `evaluate_reconstruction`, `extra_classifiers` and `guidance_max_sigma` as
    in `evaluate_text_to_3d`; `init_strength` below 1 starts each sample from the prior's regressed latent
    (`SplitVectorDiffusion.regress_latent`) at that SDEdit strength."""
    from shap_e.diffusion.sample import check_strength

    start = time.perf_counter()
    check_strength(init_strength, "init_strength")  # before the classifier is built
    options = _options(
        prior, diffusion, guidance_scale, steps, batch_size, grid_size, seed, device, sampler, vertex_placement,
        guidance_max_sigma,
    )
    options["init_strength"] = init_strength
    classifier = classifier or build_classifier()
    meshes = _sample_meshes(prior, xm, [{"images": [image_fn(a)]} for a in assets], options, progress)
    rows = []
    for i, (asset, mesh) in enumerate(zip(assets, meshes)):
        mesh = to_eval_mesh(mesh)
        row = dict(index=i, seed=seed + i, iou=round(volumetric_iou(mesh, asset_mesh(asset), resolution), 4))
        row.update(_judge(mesh, asset.category, asset.colours[0], classifier, extra_classifiers))
        rows.append(row)
    settings = {k: v for k, v in options.items() if k not in ("diffusion", "device")}
    settings.update(n=len(rows), resolution=resolution)
    keys = ("iou", "category_correct", "colour_correct") + _extra_keys(extra_classifiers)
    return _result("image_to_3d", rows, keys, settings, start)


def markdown_report(result: Dict[str, Any], title: Optional[str] = None) -> str:
    """A Markdown page: settings, the summary table and the per-item table."""
    lines = [f"# {title or 'Evaluation: ' + result['task']}", ""]
    lines += [f"- {k}: {v}" for k, v in result["settings"].items()] + [f"- seconds: {result['seconds']}", ""]
    lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in result["summary"].items()]
    rows = result["rows"]
    if rows:
        keys = list(rows[0])
        lines += ["", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    text = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|")


def write_results(result: Dict[str, Any], path: Union[str, Path], title: Optional[str] = None) -> Tuple[Path, Path]:
    """Write `result` as JSON to `path` and as Markdown beside it (same name, `.md`), each atomically."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise ValueError(f"path must end in .json (the Markdown goes beside it), got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    md_path = path.with_suffix(".md")
    write_atomic(path, json.dumps(result, indent=2, sort_keys=False) + "\n")
    write_atomic(md_path, markdown_report(result, title))
    return path, md_path


