"""Gaussian diffusion (docs/behaviour.md#gaussian-diffusion): the official module path and class,
with the official names and signatures. `GaussianDiffusion` is the process arithmetic of `shap_e.diffusion.process` plus the
DDPM/DDIM samplers, classifier guidance and the training losses (`shap_e.diffusion.variational`);
the schedule and loss helpers are re-exported from `schedules` and `losses`.

Beyond the official code: a `generator` on every random draw, v-prediction, and errors that name
the bad argument.
"""
import os
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from tqdm.auto import tqdm

from shap_e.diffusion import variational
from shap_e.diffusion.losses import (
    approx_standard_normal_cdf, discretized_gaussian_log_likelihood, mean_flat, normal_kl,
)
from shap_e.diffusion.noise import GeneratorArg, model_device, randn, randn_like
from shap_e.diffusion.process import DiffusionProcess, ModelFn, extract
from shap_e.diffusion.schedules import (
    betas_for_alpha_bar, get_beta_schedule, get_named_beta_schedule, respace_betas, space_timesteps,
)
from shap_e.diffusion.steps import MeanVariance, SampleStep
from shap_e.util.io import read_config

__all__ = [
    "GaussianDiffusion", "MeanVariance", "SampleStep", "SpacedDiffusion", "approx_standard_normal_cdf",
    "betas_for_alpha_bar", "diffusion_from_config", "discretized_gaussian_log_likelihood", "extract",
    "get_beta_schedule", "get_named_beta_schedule", "mean_flat", "normal_kl", "space_timesteps",
]

CONFIG_KEYS = (
    "schedule", "timesteps", "schedule_args", "mean_type", "respacing",
    "channel_scales", "channel_biases", "discretized_t0",
)


class GaussianDiffusion(DiffusionProcess):
    """Training and sampling utilities for a Gaussian diffusion (the official class).

    Constructor arguments are `DiffusionProcess`'s: `betas`, `model_mean_type`, `model_var_type`,
    `loss_type`, `discretized_t0`, `channel_scales`, `channel_biases` (keyword-only).
    """

    def condition_mean(
        self, cond_fn: ModelFn, p_mean_var: Mapping[str, torch.Tensor], x: torch.Tensor, t: torch.Tensor,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ) -> torch.Tensor:
        """Mean shifted by the variance times ∇ log p(y | x) = `cond_fn(x, t)` (Sohl-Dickstein et
        al. 2015, classifier guidance of DDPM sampling); `[batch, d]`."""
        gradient = cond_fn(x, self.model_timesteps(t), **(model_kwargs or {}))
        return p_mean_var["mean"].float() + p_mean_var["variance"] * gradient.float()

    def condition_score(
        self, cond_fn: ModelFn, p_mean_var: MeanVariance, x: torch.Tensor, t: torch.Tensor,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ) -> MeanVariance:
        """`p_mean_var` with ε̂ shifted by −√(1−ᾱ_t) ∇ log p(y | x) (Song et al. 2021, the score
        form of classifier guidance, used by DDIM); x̂₀ and the mean follow."""
        alpha_bar = self._extract("alphas_cumprod", t, x.shape)
        eps = self.predict_eps_from_xstart(x, t, p_mean_var["pred_xstart"])
        eps = eps - (1 - alpha_bar).sqrt() * cond_fn(x, self.model_timesteps(t), **(model_kwargs or {}))
        out = p_mean_var.copy()
        out["pred_xstart"] = self.predict_xstart_from_eps(x, t, eps)
        out["mean"], _, _ = self.q_posterior_mean_variance(out["pred_xstart"], x, t)
        return out

    def p_sample(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = False,
        denoised_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        cond_fn: Optional[ModelFn] = None,
        model_kwargs: Optional[Dict[str, Any]] = None,
        *,
        generator: GeneratorArg = None,
    ) -> SampleStep:
        """Ancestral DDPM step x_t -> x_{t-1} (noise drawn at every t, also t = 0)."""
        out = self.p_mean_variance(model, x, t, clip_denoised, denoised_fn, model_kwargs)
        noise = randn_like(x, generator)
        if cond_fn is not None:
            out["mean"] = self.condition_mean(cond_fn, out, x, t, model_kwargs)
        nonzero = (t != 0).float().reshape(-1, *([1] * (x.ndim - 1)))
        sample = out.mean + nonzero * torch.exp(0.5 * out.log_variance) * noise
        return SampleStep(sample, out.pred_xstart)

    def ddim_sample(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = False,
        denoised_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        cond_fn: Optional[ModelFn] = None,
        model_kwargs: Optional[Dict[str, Any]] = None,
        eta: float = 0.0,
        *,
        generator: GeneratorArg = None,
    ) -> SampleStep:
        """DDIM step (Song et al. 2021, eq. 12); eta=0 is deterministic, eta=1 is DDPM-like."""
        out = self.p_mean_variance(model, x, t, clip_denoised, denoised_fn, model_kwargs)
        if cond_fn is not None:
            out = self.condition_score(cond_fn, out, x, t, model_kwargs)
        eps = self.predict_eps_from_xstart(x, t, out.pred_xstart)
        alpha_bar = self._extract("alphas_cumprod", t, x.shape)
        alpha_bar_prev = self._extract("alphas_cumprod_prev", t, x.shape)
        sigma = (
            eta
            * torch.sqrt((1 - alpha_bar_prev) / (1 - alpha_bar))
            * torch.sqrt(1 - alpha_bar / alpha_bar_prev)
        )
        noise = randn_like(x, generator)
        mean = out.pred_xstart * torch.sqrt(alpha_bar_prev) + torch.sqrt(
            1 - alpha_bar_prev - sigma**2
        ) * eps
        nonzero = (t != 0).float().reshape(-1, *([1] * (x.ndim - 1)))
        return SampleStep(mean + nonzero * sigma * noise, out.pred_xstart)

    def ddim_reverse_sample(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = False,
        denoised_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        cond_fn: Optional[ModelFn] = None,
        model_kwargs: Optional[Dict[str, Any]] = None,
        eta: float = 0.0,
    ) -> SampleStep:
        """Deterministic DDIM step up the chain, x_t -> x_{t+1} (eq. 12 reversed; encodes data
        into noise); `eta` must be 0."""
        if eta != 0.0:
            raise ValueError(f"eta={eta}: the reverse DDIM ODE is deterministic; use eta=0.0")
        out = self.p_mean_variance(model, x, t, clip_denoised, denoised_fn, model_kwargs)
        if cond_fn is not None:
            out = self.condition_score(cond_fn, out, x, t, model_kwargs)
        eps = self.predict_eps_from_xstart(x, t, out.pred_xstart)
        alpha_bar_next = self._extract("alphas_cumprod_next", t, x.shape)
        sample = out.pred_xstart * torch.sqrt(alpha_bar_next) + torch.sqrt(1 - alpha_bar_next) * eps
        return SampleStep(sample, out.pred_xstart)

    # ----- sampling loops ----------------------------------------------------------------------
    def p_sample_loop(
        self, model: ModelFn, shape: Sequence[int], noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = False, denoised_fn=None, cond_fn=None,
        model_kwargs: Optional[Dict[str, Any]] = None, device: Optional[torch.device] = None,
        progress: bool = False, temp: float = 1.0, *, generator: GeneratorArg = None,
    ) -> torch.Tensor:
        """Ancestral sampling from x_T = `noise` or `temp`·N(0, I) down to t = 0; returns `shape`
        (e.g. `[batch, d]`), channel-unscaled."""
        return _last(self.p_sample_loop_progressive(
            model, shape, noise, clip_denoised, denoised_fn, cond_fn, model_kwargs, device, progress,
            temp, generator=generator))["sample"]

    def p_sample_loop_progressive(
        self, model: ModelFn, shape: Sequence[int], noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = False, denoised_fn=None, cond_fn=None,
        model_kwargs: Optional[Dict[str, Any]] = None, device: Optional[torch.device] = None,
        progress: bool = False, temp: float = 1.0, *, generator: GeneratorArg = None,
    ) -> Iterator[Dict[str, torch.Tensor]]:
        """`p_sample_loop`, yielding each step's `{"sample", "pred_xstart"}` (channel-unscaled)."""
        step = dict(clip_denoised=clip_denoised, denoised_fn=denoised_fn, cond_fn=cond_fn,
                    model_kwargs=model_kwargs, generator=generator)
        yield from self._reverse_loop(self.p_sample, model, shape, noise, device, progress, temp, generator, step)

    def ddim_sample_loop(
        self, model: ModelFn, shape: Sequence[int], noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = False, denoised_fn=None, cond_fn=None,
        model_kwargs: Optional[Dict[str, Any]] = None, device: Optional[torch.device] = None,
        progress: bool = False, eta: float = 0.0, temp: float = 1.0, *, generator: GeneratorArg = None,
    ) -> torch.Tensor:
        """DDIM sampling over every timestep of this (possibly respaced) process; as `p_sample_loop`."""
        return _last(self.ddim_sample_loop_progressive(
            model, shape, noise, clip_denoised, denoised_fn, cond_fn, model_kwargs, device, progress,
            eta, temp, generator=generator))["sample"]

    def ddim_sample_loop_progressive(
        self, model: ModelFn, shape: Sequence[int], noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = False, denoised_fn=None, cond_fn=None,
        model_kwargs: Optional[Dict[str, Any]] = None, device: Optional[torch.device] = None,
        progress: bool = False, eta: float = 0.0, temp: float = 1.0, *, generator: GeneratorArg = None,
    ) -> Iterator[Dict[str, torch.Tensor]]:
        """`ddim_sample_loop`, yielding each step's `{"sample", "pred_xstart"}` (channel-unscaled)."""
        step = dict(clip_denoised=clip_denoised, denoised_fn=denoised_fn, cond_fn=cond_fn,
                    model_kwargs=model_kwargs, eta=eta, generator=generator)
        yield from self._reverse_loop(self.ddim_sample, model, shape, noise, device, progress, temp, generator, step)

    def _reverse_loop(self, step_fn, model, shape, noise, device, progress, temp, generator, step_kwargs):
        """Run `step_fn` from t = T−1 down to 0 without gradients, yielding unscaled step dicts."""
        if not isinstance(shape, (tuple, list)):
            raise ValueError(f"shape must be a tuple or list such as (batch, d), got {shape!r}")
        if device is None:
            device = noise.device if noise is not None else model_device(model)
        x = noise if noise is not None else randn(shape, generator, device=device) * temp
        for i in tqdm(range(self.num_timesteps - 1, -1, -1), disable=not progress):
            t = torch.full((shape[0],), i, dtype=torch.int64, device=x.device)
            with torch.no_grad():
                out = step_fn(model, x, t, **step_kwargs)
            yield self.unscale_out_dict(out)
            x = out.sample

    # ----- training and the variational bound ------------------------------------------------------
    def training_losses(
        self, model: ModelFn, x_start: torch.Tensor, t: torch.Tensor,
        model_kwargs: Optional[Dict[str, Any]] = None, noise: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """Per-sample loss terms `[batch]` at timesteps `t` (see `variational.training_losses`):
        `loss`, plus `mse` and `vb` (mse loss types with learned variances)."""
        return variational.training_losses(self, model, x_start, t, model_kwargs, noise)

    def calc_bpd_loop(
        self, model: ModelFn, x_start: torch.Tensor, clip_denoised: bool = False,
        model_kwargs: Optional[Dict[str, Any]] = None, *, generator: GeneratorArg = None,
    ) -> Dict[str, torch.Tensor]:
        """The whole variational bound in bits per dimension (see `variational.calc_bpd_loop`)."""
        return variational.calc_bpd_loop(self, model, x_start, clip_denoised, model_kwargs, generator)


def _last(steps: Iterator[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    final = None
    for final in steps:
        pass
    return final


class SpacedDiffusion(GaussianDiffusion):
    """The sub-process of a diffusion through the kept timesteps `use_timesteps` (respacing).

    Its betas keep every kept ᾱ_t; the model and `cond_fn` still see the original timesteps
    (`timestep_map`). `kwargs` are the base process's `GaussianDiffusion` arguments.
    """

    def __init__(self, use_timesteps: Iterable[int], **kwargs: Any):
        if "betas" not in kwargs:
            raise TypeError("SpacedDiffusion needs betas=... and the base process's other arguments")
        self.use_timesteps = set(use_timesteps)
        self.original_num_steps = len(kwargs["betas"])
        base_alphas_cumprod = np.cumprod(1.0 - np.asarray(kwargs["betas"], dtype=np.float64))
        betas, timestep_map = respace_betas(base_alphas_cumprod, self.use_timesteps)
        super().__init__(**{**kwargs, "betas": betas, "timestep_map": timestep_map})


def _flag(config: Mapping[str, Any], key: str) -> bool:
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"diffusion config {key!r} must be true or false, got {value!r}")
    return value


def diffusion_from_config(config: Union[str, Dict[str, Any]]) -> "GaussianDiffusion":
    """A `GaussianDiffusion` (a `SpacedDiffusion` with `respacing`) from the official config dict
    (e.g. `diffusion_config.yaml`) or the path of such a YAML file.

    Keys: schedule, timesteps, schedule_args, mean_type (default epsilon), respacing,
    channel_scales, channel_biases, and `discretized_t0` (default false, as the official configs:
    the bound's t = 0 term is 0; true makes it the discretised decoder likelihood, with which the
    small priors were trained). Variances are `learned_range`, the loss `mse`.
    """
    if isinstance(config, (str, os.PathLike)):
        config = read_config(config)
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a diffusion config mapping or a YAML path, got {type(config).__name__}")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown diffusion config keys {unknown}; valid keys: {list(CONFIG_KEYS)}")
    for key in ("schedule", "timesteps"):
        if key not in config:
            raise ValueError(f"diffusion config needs {key!r}")
    betas = get_named_beta_schedule(
        config["schedule"], config["timesteps"], **(config.get("schedule_args") or {})
    )
    scales, biases = config.get("channel_scales"), config.get("channel_biases")
    kwargs = dict(
        betas=betas,
        model_mean_type=config.get("mean_type", "epsilon"),
        model_var_type="learned_range",
        loss_type="mse",
        discretized_t0=_flag(config, "discretized_t0"),
        channel_scales=None if scales is None else np.asarray(scales, dtype=np.float64),
        channel_biases=None if biases is None else np.asarray(biases, dtype=np.float64),
    )
    respacing = config.get("respacing")
    if respacing is None:
        return GaussianDiffusion(**kwargs)
    return SpacedDiffusion(use_timesteps=space_timesteps(config["timesteps"], respacing), **kwargs)
