"""Evaluation runs: models in, a result (per-item rows, means with 95 % intervals) out.

* `evaluate_reconstruction`: asset -> encoder -> latent -> mesh, against the asset (IoU, Chamfer,
  colour error, colour name, category).
* `evaluate_text_to_3d`: labelled held-out prompts -> prior -> mesh, judged by the classifier of
  `shap_e.eval.classify` (category and colour accuracy).
* `evaluate_image_to_3d`: a picture of a held-out asset -> prior -> mesh, against that asset (IoU in
  the world frame, plus category and colour).
* `evaluate_ground_truth`: the classifier on the ground-truth assets themselves, the ceiling of
  what any model can score with it.

Each takes `EvalSettings` and `Judges` (`shap_e.eval.settings`) and returns `make_result`'s dict
(`shap_e.eval.report`); `shap_e.eval.sets.evaluate_draws` runs one over the draws of a fixed set.
"""
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

from shap_e.eval.judge import asset_mesh, extra_categories, judge_mesh, predicted_category
from shap_e.eval.metrics import chamfer_and_color, to_eval_mesh, volumetric_iou
from shap_e.eval.report import make_result
from shap_e.eval.settings import EvalSettings, Judges

__all__ = [
    "LabelledPrompt",
    "evaluate_ground_truth",
    "evaluate_image_to_3d",
    "evaluate_reconstruction",
    "evaluate_text_to_3d",
    "heldout_prompts",
    "picture",
]

Device = Union[str, torch.device, None]


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


def _progress(items, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=not enabled)


def evaluate_ground_truth(
    split: str = "heldout_pairs", n: int = 120, seed: int = 0, judges: Optional[Judges] = None
) -> Dict[str, Any]:
    """The classifier's category and colour accuracy on `n` ground-truth assets of a split (dataset `seed`)."""
    from shap_e.data import iter_dataset

    start = time.perf_counter()
    judges = (judges or Judges()).built()
    rows = [judge_mesh(asset_mesh(a), a.category, a.colours[0], judges) for a in iter_dataset(split, n, seed)]
    settings = dict(split=split, n=n, seed=seed, resolution=judges.main.resolution,
                    n_references=len(judges.main.labels))
    return make_result("ground_truth", rows, settings, time.perf_counter() - start)


def evaluate_reconstruction(
    transmitter: torch.nn.Module,
    assets: Sequence[Any],
    settings: Optional[EvalSettings] = None,
    *,
    judges: Optional[Judges] = None,
    device: Device = None,
    progress: bool = False,
) -> Dict[str, Any]:
    """Encode each `ProceduralAsset` (item i with seed `settings.seed + i`), decode the latent to a mesh
    and compare it with the asset: IoU, Chamfer distance and colour error, whether the dominant colour
    keeps its name, and whether the judges still name the category, which bounds the category accuracy
    a prior decoding through this transmitter can score."""
    from shap_e.encoding import round_trip
    from shap_e.encoding.assets import load_asset

    settings, judges = settings or EvalSettings(), (judges or Judges()).built()
    start, rows = time.perf_counter(), []
    device = torch.device(device) if device is not None else next(transmitter.parameters()).device
    with tempfile.TemporaryDirectory(prefix="shap_e_eval_") as tmp:
        for i, asset in enumerate(_progress(assets, progress, "reconstruction")):
            path = os.path.join(tmp, f"{i:06d}.ply")
            asset.mesh.export(path, file_type="ply")
            mesh = to_eval_mesh(round_trip(path, transmitter, settings.grid_size, settings.vertex_placement,
                                           settings.seed + i, settings.refine_steps, device))
            rows.append(_reconstruction_row(i, asset, mesh, to_eval_mesh(load_asset(path)), settings, judges))
    record = dict(n=len(rows), **settings.record("reconstruction"))
    return make_result("reconstruction", rows, record, time.perf_counter() - start)


def _reconstruction_row(i: int, asset: Any, mesh, ref, settings: EvalSettings, judges: Judges) -> Dict[str, Any]:
    from shap_e.eval.classify import dominant_color

    name, _ = dominant_color(mesh)
    predicted = predicted_category(mesh, judges.main)
    row = dict(index=i, category=asset.category, colour=asset.colours[0], proportion=asset.proportion,
               iou=round(volumetric_iou(mesh, ref, settings.resolution), 4), colour_correct=name == asset.colours[0],
               pred_category=predicted, category_correct=predicted == asset.category,
               n_faces=int(mesh.faces.shape[0]), **extra_categories(mesh, asset.category, judges.extra))
    row.update({k: None if v is None else round(v, 5)
                for k, v in chamfer_and_color(mesh, ref, settings.n_samples, settings.seed + i).items()})
    return row


def _sample_meshes(
    prior, xm, model_kwargs_list: List[Dict[str, Any]], settings: EvalSettings, diffusion, device: torch.device,
    progress: bool,
) -> List[Any]:
    """One latent per entry of `model_kwargs_list` (each a batch of one; entry i samples with seed
    `settings.seed + i`), decoded to a `TorchMesh`."""
    from shap_e.diffusion.sample import regression_start, sample_latents
    from shap_e.models.decode import decode_latent_mesh

    batch, meshes = settings.batch_size, []
    for first in _progress(range(0, len(model_kwargs_list), batch), progress, "sampling"):
        chunk = model_kwargs_list[first:first + batch]
        kwargs = {key: [v for kw in chunk for v in kw[key]] for key in chunk[0]}
        generators = [torch.Generator().manual_seed(settings.seed + first + k) for k in range(len(chunk))]
        init = regression_start(prior, len(chunk), kwargs, settings.init_strength)
        latents = sample_latents(
            batch_size=len(chunk), model=prior, diffusion=diffusion, model_kwargs=kwargs,
            guidance_scale=settings.guidance_scale, clip_denoised=True, use_fp16=False, use_karras=True,
            karras_steps=settings.steps, sigma_min=1e-3, sigma_max=160.0, s_churn=0.0, device=device,
            sampler=settings.sampler, generator=generators, guidance_max_sigma=settings.guidance_max_sigma, **init,
        )
        meshes += [decode_latent_mesh(xm, latent, grid_size=settings.grid_size,
                                      vertex_placement=settings.vertex_placement) for latent in latents]
    return meshes


def _sampling_setup(prior, settings: Optional[EvalSettings], task: str, diffusion, device: Device):
    """(settings with the task's guidance, the diffusion (default: the official `diffusion` config), device)."""
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config

    settings = (settings or EvalSettings()).for_task(task)
    diffusion = diffusion if diffusion is not None else diffusion_from_config(load_config("diffusion"))
    device = torch.device(device) if device is not None else next(prior.parameters()).device
    return settings, diffusion, device


def evaluate_text_to_3d(
    prior: torch.nn.Module,
    xm: torch.nn.Module,
    prompts_with_labels: Sequence[LabelledPrompt],
    settings: Optional[EvalSettings] = None,
    *,
    judges: Optional[Judges] = None,
    diffusion=None,
    device: Device = None,
    progress: bool = False,
) -> Dict[str, Any]:
    """Generate one mesh per labelled prompt (sample i uses seed `settings.seed + i`) and judge its
    category and colour. Prompts may also be `(prompt, category, colour)` tuples. `diffusion`: the
    prior's (default: the official `diffusion` config)."""
    start = time.perf_counter()
    prompts = [p if isinstance(p, LabelledPrompt) else LabelledPrompt(*p) for p in prompts_with_labels]
    settings, diffusion, device = _sampling_setup(prior, settings, "text_to_3d", diffusion, device)
    judges = (judges or Judges()).built()
    meshes = _sample_meshes(prior, xm, [{"texts": [p.prompt]} for p in prompts], settings, diffusion, device, progress)
    rows = [dict(prompt=p.prompt, seed=settings.seed + i, **judge_mesh(m, p.category, p.colour, judges),
                 **_heldout_words(p)) for i, (p, m) in enumerate(zip(prompts, meshes))]
    record = dict(n=len(rows), **settings.record("text_to_3d"), classifier_resolution=judges.main.resolution)
    return make_result("text_to_3d", rows, record, time.perf_counter() - start)


def _heldout_words(prompt: LabelledPrompt) -> Dict[str, bool]:
    """Row flags: the prompt names its category / colour with a synonym no training caption uses."""
    from shap_e.data.captions import names_heldout_synonym

    flags = names_heldout_synonym(prompt.prompt, prompt.category, prompt.colour)
    return {"heldout_category_word": flags["category"], "heldout_colour_word": flags["colour"]}


def picture(asset: Any, size: int = 256, seed: int = 0):
    """The conditioning picture of an asset, as a PIL image: a photo-like render
    (`shap_e.train.condition_images`) from the +X side, 25 degrees above the horizon, on white;
    the view the small image prior was trained around, so that the object's yaw is visible."""
    from PIL import Image

    from shap_e.train.condition_images import render_condition_images
    from shap_e.encoding.assets import AssetMesh

    mesh = asset_mesh(asset)
    n_faces = mesh.faces.shape[0]
    colors = mesh.face_colors()
    colors = colors if colors is not None else torch.full((n_faces, 3), 0.8)
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
    settings: Optional[EvalSettings] = None,
    *,
    image_fn: Callable[[Any], Any] = picture,
    judges: Optional[Judges] = None,
    diffusion=None,
    device: Device = None,
    progress: bool = False,
) -> Dict[str, Any]:
    """Generate one mesh from `image_fn(asset)` (default `picture`) per asset (sample i uses seed
    `settings.seed + i`) and compare it with the pictured asset: IoU on a `settings.resolution`^3 grid
    in the world frame, category and colour. `settings.init_strength` below 1 starts each sample from
    the prior's regressed latent (`SplitVectorDiffusion.regress_latent`) at that SDEdit strength."""
    start = time.perf_counter()
    settings, diffusion, device = _sampling_setup(prior, settings, "image_to_3d", diffusion, device)
    judges = (judges or Judges()).built()
    meshes = _sample_meshes(prior, xm, [{"images": [image_fn(a)]} for a in assets], settings, diffusion, device,
                            progress)
    rows = []
    for i, (asset, mesh) in enumerate(zip(assets, meshes)):
        mesh = to_eval_mesh(mesh)
        row = dict(index=i, seed=settings.seed + i, iou=round(volumetric_iou(mesh, asset_mesh(asset),
                                                                             settings.resolution), 4))
        row.update(judge_mesh(mesh, asset.category, asset.colours[0], judges))
        rows.append(row)
    record = dict(n=len(rows), **settings.record("image_to_3d"))
    return make_result("image_to_3d", rows, record, time.perf_counter() - start)
