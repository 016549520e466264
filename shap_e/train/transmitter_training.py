"""Transmitter training: encoder + params projection + NeRSTF MLP, supervised by the asset itself.

Each step encodes a few assets and asks the decoded field for (a) signed distances at points near
and away from the surface, (b) the STF colour at surface points, and (c) NeRF renders of random
pixels of the encoder's own multiview images (coarse and fine passes, docs/behaviour.md#nerf-rendering).
"""
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from shap_e.encoding.losses import sdf_color_losses
from shap_e.encoding.targets import AssetTargets, asset_targets
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.rendering.nerf import render_rays
from shap_e.train.loop import step_generator
from shap_e.util.distributed import distributed_info, rank_share
from shap_e.util.processes import imap_in_processes

MESH_SUFFIXES = (".obj", ".ply", ".stl", ".off", ".glb", ".gltf")


@dataclass
class AssetRecord:
    batch: MultimodalBatch  # one asset (batch size 1), CPU
    targets: AssetTargets


@dataclass
class TransmitterBatch:
    encoder_batch: MultimodalBatch
    sdf_points: torch.Tensor  # [batch, n_sdf, 3]
    sdf_values: torch.Tensor  # [batch, n_sdf]
    color_points: torch.Tensor  # [batch, n_color, 3]
    colors: torch.Tensor  # [batch, n_color, 3] sRGB
    rays: Optional[torch.Tensor]  # [batch, n_rays, 2, 3]; None for batches without views
    ray_colors: Optional[torch.Tensor]  # [batch, n_rays, 3] in [0, 1], black background
    render_seed: int = 0


@dataclass
class LossWeights:
    """Weights of the loss terms; `sdf_band > 0` adds an L1 term on the SDF clamped to
    `[-sdf_band, sdf_band]` and divided by it, which weights the near-surface sign and shape
    (sharp edges) far more than the far field."""

    sdf: float = 1.0
    color: float = 1.0
    nerf: float = 1.0
    sdf_band: float = 0.0
    extra: Dict[str, float] = field(default_factory=dict)


def mesh_files(directory) -> List[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"dataset folder {str(directory)!r} does not exist")
    files = sorted(p for p in directory.rglob("*") if p.suffix.lower() in MESH_SUFFIXES)
    if not files:
        raise ValueError(f"dataset folder {directory} holds no mesh files ({', '.join(MESH_SUFFIXES)})")
    return files


def load_asset_records(
    paths: Sequence[Path], encoder: nn.Module, cache_dir=None, seed: int = 0, progress: bool = True,
    random_sample_count: int = 2**19, target_options: Optional[Dict] = None, workers: int = 1,
) -> Tuple[List[AssetRecord], List[Tuple[str, str]]]:
    """Encoder batches and supervision for every readable asset; unreadable ones are skipped and returned.

    random_sample_count: surface candidates for the farthest-point sampling of the encoder's points.
    target_options: keyword arguments of `asset_targets` (sample counts, `sigma`).
    workers: processes that prepare assets side by side (`shap_e.util.processes.imap_in_processes`,
        which says when a script needs the `__main__` guard). Every asset is seeded on its own, so
        with one torch thread in the caller too (as in the recipes) the records are the same tensor
        for tensor for any number of workers.
    Views are rendered only for encoders that read them (`encoder.use_views`).

    In a joined process group (torchrun) with a `cache_dir`, each process first prepares only its
    share of the assets into the cache (`rank_share`) and waits for the others; then every process
    reads all records from the cache. So N processes prepare the data N times faster, and every
    process trains on the same records. Without a cache each process prepares every asset itself.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    jobs = [AssetJob(str(path), seed, seed + i, random_sample_count, encoder.batch_options(), target_options or {},
                     cache_dir) for i, path in enumerate(paths)]
    rank, world = distributed_info()
    if cache_dir is not None and world > 1:
        _prepare(rank_share(jobs), workers, progress, f"assets (rank {rank}'s share)")
        dist.barrier()
    records, skipped = [], []
    for job, result in zip(jobs, _prepare(jobs, workers, progress, "assets")):
        if isinstance(result, str):
            skipped.append((job.path, result))
        else:
            records.append(result)
    if skipped:
        warnings.warn(f"skipped {len(skipped)} unreadable asset(s), e.g. {skipped[0][0]}: {skipped[0][1]}")
    if not records:
        raise ValueError(f"none of the {len(paths)} assets could be read")
    return records, skipped


def _prepare(jobs: List["AssetJob"], workers: int, progress: bool, desc: str) -> List[Union[AssetRecord, str]]:
    """`_prepare_asset` of each job, in order, in `workers` processes."""
    return list(tqdm(imap_in_processes(_prepare_asset, jobs, workers), total=len(jobs), desc=desc,
                     disable=not progress))


@dataclass
class AssetJob:
    """What preparing one asset needs (picklable: it is sent to worker processes)."""

    path: str
    batch_seed: int
    target_seed: int
    random_sample_count: int
    batch_options: Dict[str, Any]  # the encoder's `batch_options()`
    target_options: Dict[str, Any]  # keyword arguments of `asset_targets`
    cache_dir: Optional[str]


def _prepare_asset(job: AssetJob) -> Union[AssetRecord, str]:
    """One asset's `AssetRecord`, or why it could not be read (a module-level function: it runs in workers)."""
    from shap_e.encoding.batch import load_or_create_multimodal_batch

    try:
        batch = load_or_create_multimodal_batch(
            torch.device("cpu"), model_path=job.path, cache_dir=job.cache_dir,
            random_sample_count=job.random_sample_count, seed=job.batch_seed, **job.batch_options,
        )
        targets = cached_asset_targets(job.path, job.target_seed, job.target_options, job.cache_dir)
    except (ValueError, OSError, IndexError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    return AssetRecord(batch, targets)


def cached_asset_targets(path: str, seed: int, options: Dict, cache_dir=None) -> AssetTargets:
    """`asset_targets` of a mesh file, stored in `cache_dir` (keyed by the file's SHA-256, the
    seed and the options) so that a restarted run skips the winding numbers."""
    from dataclasses import asdict

    from shap_e.train.loop import atomic_save
    from shap_e.encoding.assets import load_asset
    from shap_e.encoding.batch import file_cache_key

    cache_path = None
    if cache_dir is not None:
        key = file_cache_key(path, dict(options, seed=seed, version=1))
        cache_path = Path(cache_dir) / f"targets_{key}.pt"
        if cache_path.is_file():
            return AssetTargets(**torch.load(cache_path, weights_only=True))
    targets = asset_targets(load_asset(path), generator=torch.Generator().manual_seed(seed), **options)
    if cache_path is not None:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(asdict(targets), cache_path)
    return targets


def _pick(values: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    return values[torch.randint(0, len(values), (n,), generator=g)]


def transmitter_batch_fn(
    records: Sequence[AssetRecord], assets_per_step: int, n_sdf: int, n_color: int, n_rays: int, seed: int
) -> Callable[[int, int, int], TransmitterBatch]:
    """Everything random in a step comes from `step_generator(seed, step, rank)`."""
    from shap_e.encoding.batch import stack_batches

    def batch_fn(step: int, rank: int, world_size: int) -> TransmitterBatch:
        g = step_generator(seed, step, rank)
        chosen = [records[i] for i in torch.randint(0, len(records), (assets_per_step,), generator=g)]
        sdf_points, sdf_values, color_points, colors, rays, ray_colors = [], [], [], [], [], []
        for record in chosen:
            t = record.targets
            index = torch.randint(0, len(t.sdf_points), (n_sdf,), generator=g)
            sdf_points.append(t.sdf_points[index])
            sdf_values.append(t.sdf_values[index])
            index = torch.randint(0, len(t.color_points), (n_color,), generator=g)
            color_points.append(t.color_points[index])
            colors.append(t.colors[index])
            if record.batch.views is None or n_rays == 0:
                continue
            views = record.batch.views[0]  # [V, 3, S, S]
            all_rays = record.batch.cameras.rays()  # [V, S*S, 2, 3]
            v = torch.randint(0, views.shape[0], (n_rays,), generator=g)
            p = torch.randint(0, all_rays.shape[1], (n_rays,), generator=g)
            rays.append(all_rays[v, p])
            ray_colors.append((views.flatten(2)[v, :, p] + 1) / 2)
        return TransmitterBatch(
            stack_batches([r.batch for r in chosen]), torch.stack(sdf_points), torch.stack(sdf_values),
            torch.stack(color_points), torch.stack(colors),
            torch.stack(rays) if rays else None, torch.stack(ray_colors) if ray_colors else None,
            render_seed=int(torch.randint(0, 2**31 - 1, (1,), generator=g)),
        )

    return batch_fn


def freeze_decoder(model: nn.Module) -> None:
    """Stop training a Transmitter's latent -> field map: the params projection (`encoder.params_proj`)
    and the renderer. Only the encoder proper learns, so a latent keeps decoding to the same field and
    priors trained on earlier latents stay valid."""
    if not hasattr(model, "renderer") or not hasattr(getattr(model, "encoder", None), "params_proj"):
        raise ValueError("freeze_decoder needs a Transmitter (an encoder with a params_proj, and a renderer)")
    model.encoder.params_proj.requires_grad_(False)
    model.renderer.requires_grad_(False)


def transmitter_loss_fn(weights: LossWeights, device: torch.device):
    """`loss_fn(model, batch)`: weighted SDF (L1), STF colour (L1) and NeRF (MSE, both passes) terms."""

    def loss_fn(model: nn.Module, batch: TransmitterBatch) -> Dict[str, torch.Tensor]:
        core = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        params = model(batch.encoder_batch.to(device))
        mlp = core.renderer.mlp_params(params)
        nerstf = core.renderer.nerstf

        def field_fn(position, direction, heads):
            return nerstf.query(position, mlp, direction, heads)

        sdf = field_fn(batch.sdf_points.to(device), None, ("sdf",)).sdf[..., 0]
        color = field_fn(batch.color_points.to(device), None, ("color_stf",)).color_stf
        loss_sdf, loss_color = (term.mean() for term in sdf_color_losses(
            sdf, batch.sdf_values.to(device), color, batch.colors.to(device), weights.sdf_band,
        ))
        loss_nerf = torch.zeros((), device=device)
        if weights.nerf > 0 and batch.rays is not None:  # the most expensive term; a weight of 0 skips it
            render = render_rays(
                field_fn, batch.rays.to(device), core.renderer.box.to(device), core.renderer.void.background,
                core.renderer.n_coarse_samples, core.renderer.n_fine_samples, False,
                torch.Generator(device=device).manual_seed(batch.render_seed),
            )
            target = batch.ray_colors.to(device)
            loss_nerf = F.mse_loss(render.channels, target) + F.mse_loss(render.channels_coarse, target)
        loss = weights.sdf * loss_sdf + weights.color * loss_color + weights.nerf * loss_nerf
        return {"loss": loss, "sdf": loss_sdf, "color": loss_color, "nerf": loss_nerf}

    return loss_fn
