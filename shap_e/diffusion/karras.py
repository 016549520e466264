"""Karras et al. (2022) sigma schedule, the VP->VE denoiser adapter of a Gaussian diffusion and
classifier-free guidance; the samplers themselves are in `shap_e.diffusion.samplers` (re-exported).

The σ -> timestep map runs on the device, so a sampling loop never waits for the host between
model calls.
"""
from typing import Any, Callable, Dict, Optional, Union

import numpy as np
import torch

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion
from shap_e.diffusion.samplers import (
    SAMPLERS, Denoiser, append_zero, sample_dpm2, sample_dpmpp_2m, sample_euler, sample_euler_ancestral,
    sample_heun,
)

__all__ = [
    "SAMPLERS", "KarrasDenoiser", "guided_denoiser", "karras_sigmas", "sample_dpm2", "sample_dpmpp_2m",
    "sample_euler", "sample_euler_ancestral", "sample_heun", "sigma_to_t", "sigma_to_timestep",
    "timestep_thresholds",
]


def karras_sigmas(
    steps: int,
    sigma_min: float,
    sigma_max: float,
    rho: float = 7.0,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Noise levels `[steps + 1]` float32, evenly spaced in σ^(1/ρ), then 0 (EDM eq. 5)."""
    ramp = torch.linspace(0, 1, steps)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return append_zero(sigmas).to(device)


def sigma_to_t(sigma: Union[np.floating, float], alphas_cumprod: np.ndarray) -> float:
    """Fractional diffusion timestep whose ᾱ equals 1/(σ²+1), by linear interpolation in ᾱ.

    ᾱ = 1/(σ²+1) is computed in σ's precision: float32 for the float32 values the sampler passes,
    as the reference does with NumPy 2; float64 for a Python float. Out-of-range values clamp to
    0 and T−1.
    """
    one = sigma.dtype.type(1.0) if isinstance(sigma, np.floating) else 1.0
    sigma = sigma if isinstance(sigma, np.floating) else float(sigma)
    alpha_cumprod = one / (sigma * sigma + one)
    if alpha_cumprod > alphas_cumprod[0]:
        return 0.0
    if alpha_cumprod <= alphas_cumprod[-1]:
        return float(len(alphas_cumprod) - 1)
    # ᾱ decreases with t: search the ascending reversed array, then interpolate the index.
    ascending = alphas_cumprod[::-1]
    hi = int(np.searchsorted(ascending, np.float64(alpha_cumprod), side="left"))
    lo = hi - 1
    t_lo = float(len(alphas_cumprod) - 1 - lo)
    t_hi = float(len(alphas_cumprod) - 1 - hi)
    slope = (t_hi - t_lo) / (ascending[hi] - ascending[lo])
    return float(slope * (np.float64(alpha_cumprod) - ascending[lo]) + t_lo)


def timestep_thresholds(alphas_cumprod: np.ndarray) -> torch.Tensor:
    """`[T]` float32 thresholds: the largest float32 that is <= each float64 ᾱ_t.

    For a float32 value a, `ᾱ_t >= a` exactly when `threshold_t >= a`, so the comparison against
    the float64 schedule can run in float32 on any device (MPS has no float64).
    """
    alphas = np.asarray(alphas_cumprod, dtype=np.float64)
    rounded = alphas.astype(np.float32)
    above = rounded.astype(np.float64) > alphas
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return torch.from_numpy(rounded)


def sigma_to_timestep(sigmas: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """`[batch]` float32 σ -> `[batch]` int64 `trunc(sigma_to_t(σ))`, on σ's device, no host sync.

    The truncated interpolated index is the last t with ᾱ_t >= a, a = 1/(σ²+1) in float32
    (0 when a > ᾱ_0). `thresholds` is `timestep_thresholds(ᾱ)` on σ's device.
    """
    alpha = torch.reciprocal(sigmas.float() * sigmas.float() + 1)
    # ᾱ decreases with t: count the thresholds >= a in the ascending (flipped) order.
    below = torch.searchsorted(thresholds.flip(0), alpha, side="left")
    return (len(thresholds) - 1 - below).clamp(min=0)


class KarrasDenoiser:
    """Wraps a diffusion model into D(x, σ): VE-scaled input -> clipped x̂₀
    (docs/behaviour.md#karras-sampler).

    The model sees `x / √(σ²+1)` at the integer timestep `trunc(sigma_to_t(σ))`; its x̂₀ is
    returned as is (not re-derived from σ), exactly like the reference. The official code calls
    this adapter `k_diffusion.GaussianToKarrasDenoiser`; its `k_diffusion.KarrasDenoiser` is EDM
    preconditioning, another thing.
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        diffusion: GaussianDiffusion,
        clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ):
        self.model = model
        self.diffusion = diffusion
        self.clip_denoised = clip_denoised
        self.model_kwargs = model_kwargs or {}
        self._thresholds: Dict[torch.device, torch.Tensor] = {}

    def timesteps(self, sigmas: torch.Tensor) -> torch.Tensor:
        """`[batch]` float sigmas -> `[batch]` int64 timesteps (fractional t truncated), computed
        on the sigmas' device."""
        thresholds = self._thresholds.get(sigmas.device)
        if thresholds is None:
            thresholds = timestep_thresholds(self.diffusion.alphas_cumprod).to(sigmas.device)
            self._thresholds[sigmas.device] = thresholds
        return sigma_to_timestep(sigmas, thresholds)

    def __call__(self, x: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        """`x [batch, d]`, `sigmas [batch]` -> x̂₀ `[batch, d]`."""
        return self.pred_xstart(x, sigmas, self.clip_denoised, self.model_kwargs)

    def pred_xstart(
        self, x: torch.Tensor, sigmas: torch.Tensor, clip_denoised: bool, model_kwargs: Optional[Dict[str, Any]]
    ) -> torch.Tensor:
        """x̂₀ `[batch, d]` of VE-scaled `x [batch, d]` at noise levels `sigmas [batch]`."""
        c_in = (1.0 / (sigmas**2 + 1) ** 0.5).reshape(-1, *([1] * (x.ndim - 1)))
        out = self.diffusion.p_mean_variance(
            self.model, x * c_in, self.timesteps(sigmas), clip_denoised=clip_denoised, model_kwargs=model_kwargs
        )
        return out.pred_xstart


def guided_denoiser(denoiser: Denoiser, guidance_scale: float, max_sigma: Optional[float] = None) -> Denoiser:
    """Classifier-free guidance in one batched call: D(cat[x, x]) on [cond | uncond] kwargs rows.

    The wrapped denoiser's model kwargs must already hold the conditional rows followed by the
    unconditional (zero) rows. x̂₀ = x̂₀_u + s (x̂₀_c − x̂₀_u) on every channel.

    max_sigma: guide only the rows whose σ ≤ max_sigma; above it s = 1, the conditional
    prediction alone (None: guide at every σ).
    """

    def guided(x: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        denoised = denoiser(torch.cat([x, x], dim=0), torch.cat([sigmas, sigmas], dim=0))
        cond, uncond = torch.split(denoised, len(x), dim=0)
        scale = guidance_scale
        if max_sigma is not None:  # per row: s where σ ≤ max_sigma, else 1
            scale = torch.where(sigmas <= max_sigma, guidance_scale, 1.0).to(cond.dtype)
            scale = scale.view(-1, *[1] * (cond.dim() - 1))
        return uncond + scale * (cond - uncond)

    return guided
