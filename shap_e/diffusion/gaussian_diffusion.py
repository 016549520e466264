"""Gaussian diffusion with learned-range variances (Nichol & Dhariwal 2021), docs/behaviour.md#gaussian-diffusion.

All schedule-derived arrays are float64 numpy; they are gathered per timestep and cast to float32
(`extract`), after which every operation is float32 as in the reference. Per step, the arrays are
read from float32 copies cached on the timestep's device, so that a sampling loop on an
accelerator never copies between host and device (each such copy waits for the device).
"""
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from shap_e.diffusion.losses import discretized_gaussian_log_likelihood, mean_flat, normal_kl
from shap_e.diffusion.noise import GeneratorArg, randn, randn_like
from shap_e.diffusion.schedules import get_named_beta_schedule, respace_betas, space_timesteps

__all__ = ["GaussianDiffusion", "MeanVariance", "SampleStep", "diffusion_from_config", "extract"]

MEAN_TYPES = ("x_start", "epsilon", "v")
CONFIG_KEYS = (
    "schedule", "timesteps", "schedule_args", "mean_type", "respacing",
    "channel_scales", "channel_biases",
)
ModelFn = Callable[..., torch.Tensor]


def extract(arr: np.ndarray, t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Gather `arr[t]` (float64) as float32, broadcast to `shape` (`[batch, ...]`).

    Copies `arr` to `t`'s device on every call; `GaussianDiffusion` caches that copy instead.
    """
    return _broadcast(torch.from_numpy(arr).float().to(t.device)[t], shape)


def _broadcast(values: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    values = values.reshape(values.shape + (1,) * (len(shape) - values.ndim))
    return values.expand(*shape)


@dataclass
class MeanVariance:
    """Reverse-process Gaussian p(x_{t-1} | x_t), each `[batch, d]` float32."""

    mean: torch.Tensor
    variance: torch.Tensor
    log_variance: torch.Tensor
    pred_xstart: torch.Tensor

    def __getitem__(self, key: str) -> torch.Tensor:
        # Lets code written against the reference's dict results keep working.
        return getattr(self, key)


@dataclass
class SampleStep:
    """One reverse step: the new sample and the x₀ estimate it used, `[batch, d]`."""

    sample: torch.Tensor
    pred_xstart: torch.Tensor

    def __getitem__(self, key: str) -> torch.Tensor:
        return getattr(self, key)


class GaussianDiffusion:
    """Forward/reverse process arithmetic for a given beta schedule (variance type learned_range).

    :param betas: `[T]` noise schedule in (0, 1].
    :param mean_type: what the model's first half predicts: `x_start`, `epsilon` or `v`
        (v = √ᾱ_t ε − √(1−ᾱ_t) x₀, Salimans & Ho 2022: its loss weighs high noise levels like an
        x₀ loss and low ones like an ε loss, and x̂₀ = √ᾱ_t x_t − √(1−ᾱ_t) v̂ passes x_t through).
    :param channel_scales, channel_biases: optional per-channel affine map applied to training
        data (`x * s + b`) and undone on samples.
    :param timestep_map: for a respaced process, `[T]` original timesteps the model is shown.
    """

    def __init__(
        self,
        *,
        betas: np.ndarray,
        mean_type: str = "epsilon",
        channel_scales: Optional[np.ndarray] = None,
        channel_biases: Optional[np.ndarray] = None,
        timestep_map: Optional[np.ndarray] = None,
    ):
        if mean_type not in MEAN_TYPES:
            raise ValueError(f"mean_type={mean_type!r} is unknown; use one of {list(MEAN_TYPES)}")
        betas = np.asarray(betas, dtype=np.float64)
        if betas.ndim != 1 or not ((betas > 0).all() and (betas <= 1).all()):
            raise ValueError("betas must be a 1-D array with every value in (0, 1]")
        if (channel_scales is None) != (channel_biases is None):
            raise ValueError("channel_scales and channel_biases must be given together")
        self.betas = betas
        self.mean_type = mean_type
        self.num_timesteps = len(betas)
        self.channel_scales = None if channel_scales is None else np.asarray(channel_scales)
        self.channel_biases = None if channel_biases is None else np.asarray(channel_biases)
        self.timestep_map = None if timestep_map is None else np.asarray(timestep_map, np.int64)
        self._tables: Dict[Any, Any] = {}
        self._derive_arrays()

    def _derive_arrays(self) -> None:
        betas = self.betas
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.alphas_cumprod_next = np.append(self.alphas_cumprod[1:], 0.0)
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.one_minus_alphas_cumprod = 1.0 - self.alphas_cumprod
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
        self.log_one_minus_alphas_cumprod = np.log(1.0 - self.alphas_cumprod)
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        self.posterior_variance = betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        # The t=0 posterior variance is 0; log(0) is replaced by the t=1 value.
        self.posterior_log_variance_clipped = np.log(
            np.append(self.posterior_variance[1], self.posterior_variance[1:])
        )
        self.posterior_mean_coef1 = betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_mean_coef2 = (
            (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - self.alphas_cumprod)
        )
        self.log_betas = np.log(betas)

    def table(self, name: str, device: torch.device) -> torch.Tensor:
        """The schedule array `name` (e.g. "alphas_cumprod") as a `[T]` tensor on `device`.

        Float arrays become float32 (cast from float64 once: the same values as casting each
        gathered element), `timestep_map` stays int64. Cached per device.
        """
        key = (name, torch.device(device))
        cached = self._tables.get(key)
        if cached is None:
            values = torch.from_numpy(getattr(self, name))
            if values.is_floating_point():
                values = values.float()
            # Cast on the host: some devices (MPS) have no float64.
            cached = self._tables[key] = values.to(device)
        return cached

    def _extract(self, name: str, t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """`extract` from the cached device copy of the array `name`; `[batch, ...]` = `shape`."""
        return _broadcast(self.table(name, t.device)[t], shape)

    # ----- forward process -------------------------------------------------------------------
    def q_mean_variance(self, x_start: torch.Tensor, t: torch.Tensor):
        """q(x_t | x_0): `(mean, variance, log_variance)`, each shaped like `x_start` `[batch, d]`."""
        mean = self._extract("sqrt_alphas_cumprod", t, x_start.shape) * x_start
        variance = self._extract("one_minus_alphas_cumprod", t, x_start.shape)
        log_variance = self._extract("log_one_minus_alphas_cumprod", t, x_start.shape)
        return mean, variance, log_variance

    def q_sample(
        self,
        x_start: torch.Tensor,
        t: torch.Tensor,
        noise: Optional[torch.Tensor] = None,
        generator: GeneratorArg = None,
    ) -> torch.Tensor:
        """Draw x_t ~ q(x_t | x_0) = √ᾱ_t x₀ + √(1−ᾱ_t) ε; `[batch, d]`."""
        if noise is None:
            noise = randn_like(x_start, generator)
        return (
            self._extract("sqrt_alphas_cumprod", t, x_start.shape) * x_start
            + self._extract("sqrt_one_minus_alphas_cumprod", t, x_start.shape) * noise
        )

    def q_posterior_mean_variance(self, x_start: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor):
        """q(x_{t-1} | x_t, x_0): `(mean, variance, log_variance_clipped)`, each `[batch, d]`."""
        mean = (
            self._extract("posterior_mean_coef1", t, x_t.shape) * x_start
            + self._extract("posterior_mean_coef2", t, x_t.shape) * x_t
        )
        variance = self._extract("posterior_variance", t, x_t.shape)
        log_variance = self._extract("posterior_log_variance_clipped", t, x_t.shape)
        return mean, variance, log_variance

    # ----- reverse process -------------------------------------------------------------------
    def model_timesteps(self, t: torch.Tensor) -> torch.Tensor:
        """The timesteps the model sees: `t` itself, or the original ones for a respaced process."""
        if self.timestep_map is None:
            return t
        return self.table("timestep_map", t.device)[t]

    def p_mean_variance(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ) -> MeanVariance:
        """Evaluate `model(x [batch, d], t [batch]) -> [batch, 2d]` and form p(x_{t-1} | x_t)."""
        output = model(x, self.model_timesteps(t), **(model_kwargs or {}))
        return self.mean_variance_from_output(output, x, t, clip_denoised)

    def mean_variance_from_output(
        self, output: torch.Tensor, x: torch.Tensor, t: torch.Tensor, clip_denoised: bool
    ) -> MeanVariance:
        """p(x_{t-1} | x_t) from a model output `[batch, 2d]` = [mean part | variance part]."""
        if output.shape[1] != 2 * x.shape[1]:
            raise ValueError(
                f"model output has {output.shape[1]} channels, expected 2 * {x.shape[1]} "
                "(mean part and learned-range variance part)"
            )
        mean_part, var_values = torch.split(output, x.shape[1], dim=1)
        min_log = self._extract("posterior_log_variance_clipped", t, x.shape)
        max_log = self._extract("log_betas", t, x.shape)
        frac = (var_values + 1) / 2
        log_variance = frac * max_log + (1 - frac) * min_log
        if self.mean_type == "x_start":
            pred_xstart = mean_part
        elif self.mean_type == "v":
            pred_xstart = self.predict_xstart_from_v(x, t, mean_part)
        else:
            pred_xstart = self.predict_xstart_from_eps(x, t, mean_part)
        if clip_denoised:
            pred_xstart = self.clip_xstart(pred_xstart)
        mean, _, _ = self.q_posterior_mean_variance(pred_xstart, x, t)
        return MeanVariance(mean, torch.exp(log_variance), log_variance, pred_xstart)

    def predict_xstart_from_eps(self, x_t: torch.Tensor, t: torch.Tensor, eps: torch.Tensor):
        """x̂₀ = √(1/ᾱ_t) x_t − √(1/ᾱ_t − 1) ε̂; `[batch, d]`."""
        return (
            self._extract("sqrt_recip_alphas_cumprod", t, x_t.shape) * x_t
            - self._extract("sqrt_recipm1_alphas_cumprod", t, x_t.shape) * eps
        )

    def predict_xstart_from_v(self, x_t: torch.Tensor, t: torch.Tensor, v: torch.Tensor):
        """x̂₀ = √ᾱ_t x_t − √(1−ᾱ_t) v̂; `[batch, d]`."""
        return (
            self._extract("sqrt_alphas_cumprod", t, x_t.shape) * x_t
            - self._extract("sqrt_one_minus_alphas_cumprod", t, x_t.shape) * v
        )

    def predict_eps_from_xstart(self, x_t: torch.Tensor, t: torch.Tensor, pred_xstart: torch.Tensor):
        """ε̂ = (√(1/ᾱ_t) x_t − x̂₀) / √(1/ᾱ_t − 1); `[batch, d]`."""
        return (
            self._extract("sqrt_recip_alphas_cumprod", t, x_t.shape) * x_t - pred_xstart
        ) / self._extract("sqrt_recipm1_alphas_cumprod", t, x_t.shape)

    def p_sample(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
        generator: GeneratorArg = None,
    ) -> SampleStep:
        """Ancestral DDPM step x_t -> x_{t-1} (noise drawn at every t, also t = 0)."""
        out = self.p_mean_variance(model, x, t, clip_denoised, model_kwargs)
        noise = randn_like(x, generator)
        nonzero = (t != 0).float().reshape(-1, *([1] * (x.ndim - 1)))
        sample = out.mean + nonzero * torch.exp(0.5 * out.log_variance) * noise
        return SampleStep(sample, out.pred_xstart)

    def ddim_sample(
        self,
        model: ModelFn,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
        eta: float = 0.0,
        generator: GeneratorArg = None,
    ) -> SampleStep:
        """DDIM step (Song et al. 2021, eq. 12); eta=0 is deterministic, eta=1 is DDPM-like."""
        out = self.p_mean_variance(model, x, t, clip_denoised, model_kwargs)
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

    def p_sample_loop(
        self,
        model: ModelFn,
        shape: Sequence[int],
        noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
        device: Optional[torch.device] = None,
        progress: bool = False,
        generator: GeneratorArg = None,
    ) -> torch.Tensor:
        """Ancestral sampling from x_T = `noise` or N(0, I) down to t = 0; returns `shape`
        (e.g. `[batch, d]`), channel-unscaled."""
        x = noise if noise is not None else randn(shape, generator, device=device)
        for t in self._timesteps(shape[0], x.device, progress):
            x = self.p_sample(model, x, t, clip_denoised, model_kwargs, generator).sample
        return self.unscale_channels(x)

    def ddim_sample_loop(
        self,
        model: ModelFn,
        shape: Sequence[int],
        noise: Optional[torch.Tensor] = None,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
        device: Optional[torch.device] = None,
        progress: bool = False,
        generator: GeneratorArg = None,
        eta: float = 0.0,
    ) -> torch.Tensor:
        """DDIM sampling over every timestep of this (possibly respaced) process; as `p_sample_loop`."""
        x = noise if noise is not None else randn(shape, generator, device=device)
        for t in self._timesteps(shape[0], x.device, progress):
            x = self.ddim_sample(model, x, t, clip_denoised, model_kwargs, eta, generator).sample
        return self.unscale_channels(x)

    def _timesteps(self, batch: int, device: torch.device, progress: bool):
        """`[batch]` int64 timestep tensors from T−1 down to 0."""
        for i in tqdm(range(self.num_timesteps - 1, -1, -1), disable=not progress):
            yield torch.full((batch,), i, dtype=torch.int64, device=device)

    # ----- channel scaling ---------------------------------------------------------------------
    def scale_channels(self, x: torch.Tensor) -> torch.Tensor:
        """Data -> diffusion space: `x * s + b` per channel (dim 1); identity without scales."""
        if self.channel_scales is None:
            return x
        scales, biases = self._channel_affine(x)
        return x * scales + biases

    def unscale_channels(self, x: torch.Tensor) -> torch.Tensor:
        """Diffusion -> data space: `(x − b) / s` per channel (dim 1)."""
        if self.channel_scales is None:
            return x
        scales, biases = self._channel_affine(x)
        return (x - biases) / scales

    def clip_xstart(self, x: torch.Tensor) -> torch.Tensor:
        """Clamp an x̂₀ in diffusion space to the data range [-1, 1] (the latents' tanh range),
        mapped through the channel scaling when there is one."""
        if self.channel_scales is None:
            return x.clamp(-1, 1)
        scales, biases = self._channel_affine(x)
        lo, hi = biases - scales.abs(), biases + scales.abs()
        return torch.minimum(torch.maximum(x, lo), hi)

    def _channel_affine(self, x: torch.Tensor):
        """The per-channel scales and biases, as tensors on x's device and dtype (made once per pair)."""
        key = ("affine", x.device, x.dtype)
        if key not in self._tables:
            self._tables[key] = tuple(
                torch.from_numpy(a).to(x.dtype).to(x.device) for a in (self.channel_scales, self.channel_biases)
            )
        view = [1, -1] + [1] * (x.ndim - 2)
        scales, biases = self._tables[key]
        return scales.reshape(view), biases.reshape(view)

    # ----- training ----------------------------------------------------------------------------
    def training_losses(
        self,
        model: ModelFn,
        x_start: torch.Tensor,
        t: torch.Tensor,
        model_kwargs: Optional[Dict[str, Any]] = None,
        noise: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """Hybrid loss L_simple + L_vb (improved DDPM); each entry `[batch]`.

        `mse` regresses the mean part on its target (x₀, ε or v); `vb` trains only the variance part:
        the mean part is detached there so the bound does not pull on the mean prediction.
        """
        x_start = self.scale_channels(x_start)
        if noise is None:
            noise = torch.randn_like(x_start)
        x_t = self.q_sample(x_start, t, noise=noise)
        output = model(x_t, self.model_timesteps(t), **(model_kwargs or {}))
        mean_part, var_values = torch.split(output, x_t.shape[1], dim=1)
        frozen = torch.cat([mean_part.detach(), var_values], dim=1)
        vb = self._vb_bits(frozen, x_start, x_t, t)
        if self.mean_type == "x_start":
            target = x_start
        elif self.mean_type == "v":
            target = (self._extract("sqrt_alphas_cumprod", t, x_t.shape) * noise
                      - self._extract("sqrt_one_minus_alphas_cumprod", t, x_t.shape) * x_start)
        else:
            target = noise
        mse = mean_flat((target - mean_part) ** 2)
        return {"loss": mse + vb, "mse": mse, "vb": vb}

    def _vb_bits(self, output, x_start, x_t, t) -> torch.Tensor:
        """Per-sample variational-bound term in bits: KL for t > 0, decoder NLL at t = 0."""
        true_mean, _, true_log_variance = self.q_posterior_mean_variance(x_start, x_t, t)
        out = self.mean_variance_from_output(output, x_t, t, clip_denoised=False)
        kl = normal_kl(true_mean, true_log_variance, out.mean, out.log_variance)
        kl = mean_flat(kl) / math.log(2.0)
        nll = -discretized_gaussian_log_likelihood(x_start, out.mean, 0.5 * out.log_variance)
        nll = mean_flat(nll) / math.log(2.0)
        return torch.where(t == 0, nll, kl)


def diffusion_from_config(config: Dict[str, Any]) -> GaussianDiffusion:
    """Build a `GaussianDiffusion` from the official config dict (e.g. `diffusion_config.yaml`).

    Keys: schedule, timesteps, schedule_args, mean_type (default epsilon), respacing,
    channel_scales, channel_biases.
    """
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
        mean_type=config.get("mean_type", "epsilon"),
        channel_scales=None if scales is None else np.asarray(scales, dtype=np.float64),
        channel_biases=None if biases is None else np.asarray(biases, dtype=np.float64),
    )
    respacing = config.get("respacing")
    if respacing is None:
        return GaussianDiffusion(betas=betas, **kwargs)
    base_alphas_cumprod = np.cumprod(1.0 - betas)
    keep = space_timesteps(config["timesteps"], respacing)
    new_betas, timestep_map = respace_betas(base_alphas_cumprod, keep)
    return GaussianDiffusion(betas=new_betas, timestep_map=timestep_map, **kwargs)
