"""The models of a `shap-e text`/`image` run and the loop that draws and writes each planned sample.

A command line keeps memory near the largest single model: the prompts or pictures are embedded
first and CLIP is freed, the prior is freed after the last sample, and the decoder (only the
decoding part of a transmitter) is loaded when the first latent is decoded. The web app keeps its
models between requests.
"""
import gc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from shap_e import __version__
from shap_e.cli.common import CliError, DTYPES, resolve_init_strength, say, write_sample
from shap_e.cli.samples import Job
from shap_e.diffusion.presets import SamplingPreset
from shap_e.diffusion.samplers import Callback as StepCallback

__all__ = ["Pipeline", "Plan", "Sample", "generate_all", "load_pipeline", "pick_decoder"]


@dataclass
class Sample:
    """One sample still to draw: its job (prompt or picture), folder and request (what meta.json records;
    a folder holding the same request is kept), and whether it replaces another sample's folder."""

    job: Job
    folder: Path
    request: Dict[str, Any]
    replace: bool = False
    meta: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """What one `shap-e text`/`image` call draws, read and checked before any model is loaded.

    `jobs`: the samples still to draw; `notes`: lines for the user (prompt words the model never
    saw); `init_latent`: the `--init-latent` `[d_latent]`, if any.
    """

    jobs: List[Sample]
    model: str
    decoder: str
    settings: SamplingPreset
    notes: List[str] = field(default_factory=list)
    init_latent: Optional[torch.Tensor] = None


def pick_decoder(name: str, cache_dir) -> str:
    """The prior's first decoder whose weights are cached, else its last (downloaded on load)."""
    from shap_e.models.cache import weights_cached
    from shap_e.models.registry import get_spec

    spec = get_spec(name)
    if not spec.decoders:
        raise CliError(f"model {name!r} is not a prior (its registry entry names no decoders)")
    return next((d for d in spec.decoders if weights_cached(d, cache_dir)), spec.decoders[-1])


@dataclass
class Pipeline:
    """The models of a `shap-e text`/`image` run: the prior (a command line frees it after the last
    sample), its diffusion, and the decoder, loaded on first use (`load_decoder`: a transmitter's
    decoder part only)."""

    prior: Optional[torch.nn.Module]
    diffusion: Any
    decoder_name: str
    device: torch.device
    cache_dir: Optional[str]
    _decoder: Optional[torch.nn.Module] = None

    def decoder(self) -> torch.nn.Module:
        from shap_e.models.decode import load_decoder

        if self._decoder is None:
            t0 = time.perf_counter()
            self._decoder = load_decoder(self.decoder_name, self.device, self.cache_dir)
            say(f"loaded {self.decoder_name} (decoder) in {time.perf_counter() - t0:.1f} s")
        return self._decoder

    def release_prior(self) -> None:
        """Free the prior's memory once no more samples are drawn."""
        self.prior = None
        gc.collect()


def load_pipeline(name: str, device: torch.device, cache_dir, decoder: Optional[str] = None,
                  precision: Optional[str] = None) -> Pipeline:
    """The prior `name` (loaded now, in `precision`) and its diffusion; its `decoder` (default:
    `pick_decoder`) loads on first use."""
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config, load_model
    from shap_e.models.registry import get_spec

    decoder = decoder or pick_decoder(name, cache_dir)
    t0 = time.perf_counter()
    prior = load_model(name, device=device, cache_dir=cache_dir, precision=precision)
    say(f"loaded {name}{' (int8)' if precision == 'int8' else ''} in {time.perf_counter() - t0:.1f} s")
    return Pipeline(prior, diffusion_from_config(load_config(get_spec(name).diffusion)), decoder, device, cache_dir)


def generate_all(pipeline: Pipeline, plan: Plan, samples: Iterable[Sample], device, args,
                 callback: StepCallback = None, release: bool = False) -> List[Path]:
    """Draw and write every sample of `samples` (from `plan.jobs`); returns their folders. `callback`
    sees every sampler step of every sample (see `sample_latents`) with `sample` (its index) added.

    The prompts or pictures are embedded first; with `release` (a command line, which loads its
    models for this call alone) CLIP is freed then and the prior after the last sample.
    """
    samples = list(samples)
    if not samples:
        return []
    resolve_init_strength(samples[0].request["init_strength"], None, pipeline.prior, plan.model,
                          from_latent=plan.init_latent is not None)
    conditions = {}
    for sample in samples:
        if sample.job.key not in conditions:
            conditions[sample.job.key] = condition(pipeline.prior, plan, sample)
    if release:
        release_encoders()
    folders = []
    for index, sample in enumerate(samples):
        step = None if callback is None else (lambda info, i=index: callback({**info, "sample": i}))
        latent = draw(pipeline, plan, sample, conditions[sample.job.key], device, args, step)
        if release and index == len(samples) - 1:
            pipeline.release_prior()
        write_sample(pipeline.decoder(), latent, sample.folder, sample.meta, args, overwrite=sample.replace)
        say(f"wrote {sample.folder}")
        folders.append(sample.folder)
    return folders


def release_encoders() -> None:
    """Free CLIP once every prompt and picture is embedded: sampling needs only the prior."""
    from shap_e.models.clip import release_default_clips

    release_default_clips()
    gc.collect()


def condition(prior, plan: Plan, sample: Sample) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A job's prompt or picture as `sample_latents` inputs, embedded now so that the text or image
    encoder can be freed before sampling: `(model_kwargs, start)`, where `start` says where sampling
    starts: `--init-latent` at `--init-strength`, else the latent the prior reads off a picture
    (`regression_start`), else noise (`{}`)."""
    from shap_e.diffusion.sample import regression_start

    strength = sample.request["init_strength"]
    if plan.init_latent is not None:
        start = {"init_latent": plan.init_latent, "strength": strength}
    else:
        start = regression_start(prior, 1, sample.job.conditions, strength)
    model_kwargs = sample.job.conditions
    if hasattr(prior, "cached_model_kwargs"):
        model_kwargs = prior.cached_model_kwargs(1, model_kwargs)
    return model_kwargs, start


def draw(pipeline: Pipeline, plan: Plan, sample: Sample, inputs, device, args, callback: StepCallback = None):
    """The `[d_latent]` latent of `sample.request["seed"]`, drawn alone; its sampling time goes to `sample.meta`."""
    from shap_e.diffusion.sample import sample_latents

    (model_kwargs, start), request, settings = inputs, sample.request, plan.settings
    t0 = time.perf_counter()
    latent = sample_latents(
        batch_size=1, model=pipeline.prior, diffusion=pipeline.diffusion, model_kwargs=model_kwargs,
        guidance_scale=request["guidance"], clip_denoised=True, use_fp16=False, use_karras=True,
        karras_steps=settings.karras_steps, sigma_min=settings.sigma_min, sigma_max=settings.sigma_max,
        s_churn=settings.s_churn, device=device, progress=True, sampler=settings.sampler,
        generator=[torch.Generator().manual_seed(request["seed"])], dtype=DTYPES.get(args.dtype),
        guidance_max_sigma=request["guidance_max_sigma"], callback=callback, cuda_graph=args.cuda_graph, **start,
    )[0]
    sample.meta = {**request, "package_version": __version__,
                   "seconds": {"sampling": round(time.perf_counter() - t0, 3)}}
    return latent
