"""The arithmetic of a Gaussian diffusion process (Ho et al. 2020; Nichol & Dhariwal 2021;
docs/behaviour.md#gaussian-diffusion): the forward process q, the model's reverse Gaussian p,
x̂₀/ε̂ conversions and channel scaling.
`shap_e.diffusion.gaussian_diffusion.GaussianDiffusion` adds the samplers and losses to it.

All schedule-derived arrays are float64 numpy; they are gathered per timestep and cast to float32,
after which every operation is float32 as in the reference. Per step, the arrays are read from
float32 copies cached on the timestep's device, so that a sampling loop on an accelerator never
copies between host and device (each such copy waits for the device).

Beyond the official code: `model_mean_type="v"` (v-prediction), and `clip_denoised` clamps x̂₀ to
the data range [-1, 1] *through* the channel scaling (the same clamp as the official one when there
is no scaling, which is every official config).
"""
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np
import torch

from shap_e.diffusion.noise import GeneratorArg, randn_like
from shap_e.diffusion.steps import MeanVariance

__all__ = ["LOSS_TYPES", "MEAN_TYPES", "VAR_TYPES", "DiffusionProcess", "extract"]

MEAN_TYPES = ("x_prev", "x_start", "epsilon", "v")
VAR_TYPES = ("learned", "learned_range", "fixed_small", "fixed_large")
LOSS_TYPES = ("mse", "rescaled_mse", "kl", "rescaled_kl")
ModelFn = Callable[..., Any]


def extract(arr: np.ndarray, t: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Gather `arr[t]` (float64) as float32, broadcast to `shape` (`[batch, ...]`).

    Copies `arr` to `t`'s device on every call; `GaussianDiffusion` caches that copy instead.
    """
    return _broadcast(torch.from_numpy(arr).float().to(t.device)[t], shape)


def _broadcast(values: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    values = values.reshape(values.shape + (1,) * (len(shape) - values.ndim))
    return values.expand(*shape)


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is unknown; use one of {list(choices)}")


class DiffusionProcess:
    """The arithmetic of a Gaussian diffusion process for a beta schedule: q, the model's p, x̂₀.

    :param betas: `[T]` noise schedule in (0, 1].
    :param model_mean_type: what the model's mean part predicts: `epsilon`, `x_start`, `x_prev`
        (the posterior mean) or `v` (v = √ᾱ_t ε − √(1−ᾱ_t) x₀, Salimans & Ho 2022).
    :param model_var_type: `learned_range` (the model's second half interpolates between the
        posterior variance and β_t), `learned` (it is the log variance), `fixed_small` (posterior
        variance) or `fixed_large` (β_t); the learned types make the model output `[batch, 2d]`.
    :param loss_type: `mse` (+ the variational bound for learned variances), `rescaled_mse`,
        `kl` or `rescaled_kl`.
    :param discretized_t0: use the discretised Gaussian likelihood as the t = 0 term of the bound
        (for 8-bit data); otherwise that term is 0, as the official configs have it.
    :param channel_scales, channel_biases: optional per-channel affine map applied to training
        data (`x * s + b`) and undone on samples.
    :param timestep_map: for a respaced process, `[T]` original timesteps the model is shown
        (`SpacedDiffusion` sets it).
    """

    def __init__(
        self,
        *,
        betas: Sequence[float],
        model_mean_type: str = "epsilon",
        model_var_type: str = "learned_range",
        loss_type: str = "mse",
        discretized_t0: bool = False,
        channel_scales: Optional[np.ndarray] = None,
        channel_biases: Optional[np.ndarray] = None,
        timestep_map: Optional[np.ndarray] = None,
    ):
        _check_choice("model_mean_type", model_mean_type, MEAN_TYPES)
        _check_choice("model_var_type", model_var_type, VAR_TYPES)
        _check_choice("loss_type", loss_type, LOSS_TYPES)
        betas = np.array(betas, dtype=np.float64)
        if betas.ndim != 1 or not ((betas > 0).all() and (betas <= 1).all()):
            raise ValueError("betas must be a 1-D array with every value in (0, 1]")
        self.betas = betas
        self.model_mean_type, self.model_var_type, self.loss_type = model_mean_type, model_var_type, loss_type
        self.discretized_t0 = discretized_t0
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
        # fixed_large: β_t, with the t=0 value raised to β̃_1 for a better decoder likelihood.
        self.fixed_large_variance = np.append(self.posterior_variance[1], betas[1:])
        self.fixed_large_log_variance = np.log(self.fixed_large_variance)
        self.recip_posterior_mean_coef1 = 1.0 / self.posterior_mean_coef1
        self.posterior_mean_coef2_over_coef1 = self.posterior_mean_coef2 / self.posterior_mean_coef1

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

    def get_sigmas(self, t: torch.Tensor) -> torch.Tensor:
        """The VE noise level σ_t = √(1/ᾱ_t − 1) of each timestep, float32 shaped like `t`."""
        return self._extract("sqrt_recipm1_alphas_cumprod", t, t.shape)

    # ----- forward process -------------------------------------------------------------------
    def q_mean_variance(self, x_start: torch.Tensor, t: torch.Tensor):
        """q(x_t | x_0): `(mean, variance, log_variance)`, each shaped like `x_start` `[batch, d]`."""
        mean = self._extract("sqrt_alphas_cumprod", t, x_start.shape) * x_start
        variance = self._extract("one_minus_alphas_cumprod", t, x_start.shape)
        log_variance = self._extract("log_one_minus_alphas_cumprod", t, x_start.shape)
        return mean, variance, log_variance

    def q_sample(
        self, x_start: torch.Tensor, t: torch.Tensor, noise: Optional[torch.Tensor] = None,
        *, generator: GeneratorArg = None,
    ) -> torch.Tensor:
        """Draw x_t ~ q(x_t | x_0) = √ᾱ_t x₀ + √(1−ᾱ_t) ε; `[batch, d]`."""
        if noise is None:
            noise = randn_like(x_start, generator)
        if noise.shape != x_start.shape:
            raise ValueError(f"noise {list(noise.shape)} must have x_start's shape {list(x_start.shape)}")
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
        clip_denoised: bool = False,
        denoised_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ) -> MeanVariance:
        """Evaluate `model(x [batch, d], t [batch])` and form p(x_{t-1} | x_t).

        The model returns `[batch, 2d]` (learned variances) or `[batch, d]`, or a tuple
        `(output, extra)`. `denoised_fn` maps x̂₀ before the optional clamp.
        """
        output = model(x, self.model_timesteps(t), **(model_kwargs or {}))
        return self.mean_variance_from_output(output, x, t, clip_denoised, denoised_fn)

    def mean_variance_from_output(
        self,
        output: Any,
        x: torch.Tensor,
        t: torch.Tensor,
        clip_denoised: bool,
        denoised_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> MeanVariance:
        """p(x_{t-1} | x_t) from a model output (`[batch, 2d]` = [mean part | variance part] for
        learned variances, else `[batch, d]`; or a tuple `(output, extra)`)."""
        extra = None
        if isinstance(output, tuple):
            output, extra = output
        mean_part, variance, log_variance = self._split_variance(output, x, t)
        if self.model_mean_type == "x_prev":
            pred_xstart = self._process_xstart(self.predict_xstart_from_xprev(x, t, mean_part),
                                               clip_denoised, denoised_fn)
            return MeanVariance(mean_part, variance, log_variance, pred_xstart, extra)
        if self.model_mean_type == "x_start":
            pred_xstart = mean_part
        elif self.model_mean_type == "v":
            pred_xstart = self.predict_xstart_from_v(x, t, mean_part)
        else:
            pred_xstart = self.predict_xstart_from_eps(x, t, mean_part)
        pred_xstart = self._process_xstart(pred_xstart, clip_denoised, denoised_fn)
        mean, _, _ = self.q_posterior_mean_variance(pred_xstart, x, t)
        return MeanVariance(mean, variance, log_variance, pred_xstart, extra)

    def _split_variance(self, output: torch.Tensor, x: torch.Tensor, t: torch.Tensor):
        """`(mean part, variance, log variance)` of a model output, by `model_var_type`."""
        if self.model_var_type in ("fixed_small", "fixed_large"):
            name = "posterior" if self.model_var_type == "fixed_small" else "fixed_large"
            log_name = "posterior_log_variance_clipped" if name == "posterior" else "fixed_large_log_variance"
            return (output, self._extract(f"{name}_variance", t, x.shape), self._extract(log_name, t, x.shape))
        if output.shape[1] != 2 * x.shape[1]:
            raise ValueError(
                f"model output has {output.shape[1]} channels, expected 2 * {x.shape[1]} "
                f"(mean part and {self.model_var_type} variance part)"
            )
        mean_part, var_values = torch.split(output, x.shape[1], dim=1)
        if self.model_var_type == "learned":
            return mean_part, torch.exp(var_values), var_values
        min_log = self._extract("posterior_log_variance_clipped", t, x.shape)
        max_log = self._extract("log_betas", t, x.shape)
        frac = (var_values + 1) / 2  # the model's [-1, 1] spans [posterior variance, β_t]
        log_variance = frac * max_log + (1 - frac) * min_log
        return mean_part, torch.exp(log_variance), log_variance

    def _process_xstart(self, x: torch.Tensor, clip_denoised: bool, denoised_fn) -> torch.Tensor:
        if denoised_fn is not None:
            x = denoised_fn(x)
        return self.clip_xstart(x) if clip_denoised else x

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

    def predict_xstart_from_xprev(self, x_t: torch.Tensor, t: torch.Tensor, xprev: torch.Tensor):
        """x̂₀ = (x_{t-1} − coef2_t x_t) / coef1_t, inverting the posterior mean; `[batch, d]`."""
        return (
            self._extract("recip_posterior_mean_coef1", t, x_t.shape) * xprev
            - self._extract("posterior_mean_coef2_over_coef1", t, x_t.shape) * x_t
        )

    def v_from_eps(self, x_start: torch.Tensor, t: torch.Tensor, eps: torch.Tensor):
        """v = √ᾱ_t ε − √(1−ᾱ_t) x₀, the v-prediction target; `[batch, d]`."""
        return (
            self._extract("sqrt_alphas_cumprod", t, x_start.shape) * eps
            - self._extract("sqrt_one_minus_alphas_cumprod", t, x_start.shape) * x_start
        )

    def predict_eps_from_xstart(self, x_t: torch.Tensor, t: torch.Tensor, pred_xstart: torch.Tensor):
        """ε̂ = (√(1/ᾱ_t) x_t − x̂₀) / √(1/ᾱ_t − 1); `[batch, d]`."""
        return (
            self._extract("sqrt_recip_alphas_cumprod", t, x_t.shape) * x_t - pred_xstart
        ) / self._extract("sqrt_recipm1_alphas_cumprod", t, x_t.shape)


    # ----- channel scaling ---------------------------------------------------------------------
    def scale_channels(self, x: torch.Tensor) -> torch.Tensor:
        """Data -> diffusion space: `x * s + b` per channel (dim 1); identity without scales."""
        scales, biases = self._channel_affine(x)
        return x * scales + biases if scales is not None else x

    def unscale_channels(self, x: torch.Tensor) -> torch.Tensor:
        """Diffusion -> data space: `(x − b) / s` per channel (dim 1)."""
        scales, biases = self._channel_affine(x)
        return (x - biases) / scales if scales is not None else x

    def unscale_out_dict(self, out: Mapping[str, Any]) -> Dict[str, Any]:
        """A plain dict of `out` with every tensor value mapped back to data space."""
        return {k: self.unscale_channels(v) if isinstance(v, torch.Tensor) else v for k, v in out.items()}

    def clip_xstart(self, x: torch.Tensor) -> torch.Tensor:
        """Clamp an x̂₀ in diffusion space to the data range [-1, 1] (the latents' tanh range),
        mapped through the channel scaling when there is one."""
        scales, biases = self._channel_affine(x)
        if scales is None:
            return x.clamp(-1, 1)
        lo, hi = biases - scales.abs(), biases + scales.abs()
        return torch.minimum(torch.maximum(x, lo), hi)

    def _channel_affine(self, x: torch.Tensor):
        """`(scales, biases)` as `[1, C, 1, ...]` tensors on x's device and dtype (made once per
        device and dtype; a missing one is 1 or 0), or `(None, None)` without channel scaling."""
        if self.channel_scales is None and self.channel_biases is None:
            return None, None
        key = ("affine", x.device, x.dtype)
        if key not in self._tables:
            count = len(self.channel_scales if self.channel_scales is not None else self.channel_biases)
            scales = self.channel_scales if self.channel_scales is not None else np.ones(count)
            biases = self.channel_biases if self.channel_biases is not None else np.zeros(count)
            self._tables[key] = tuple(
                torch.from_numpy(np.asarray(a)).to(x.dtype).to(x.device) for a in (scales, biases)
            )
        view = [1, -1] + [1] * (x.ndim - 2)
        scales, biases = self._tables[key]
        return scales.reshape(view), biases.reshape(view)
