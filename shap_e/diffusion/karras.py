"""Karras et al. (2022) sigma schedule, the VP->VE denoiser adapter, guidance and ODE/SDE samplers.

Every sampler is `(denoiser, x, sigmas, generator=None, progress=False, callback=None, **options)`:
`denoiser(x [batch, d], sigma [batch]) -> x̂₀ [batch, d]`, `x` starts at `sigmas[0]` noise level and
`sigmas` is `[steps + 1]` ending in 0. `callback` receives a dict per step with keys
`x, i, sigma, sigma_hat, denoised`.

No sampler reads a tensor back to the host inside its loop (no `.item()`, no `if tensor`, no
`.cpu()`): branches use the σ grid read once before the loop, and the σ -> timestep map runs on
the device, so an accelerator never waits for the host between model calls.
"""
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
from tqdm.auto import tqdm

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion
from shap_e.diffusion.noise import GeneratorArg, randn_like

__all__ = [
    "SAMPLERS", "KarrasDenoiser", "guided_denoiser", "karras_sigmas", "sample_dpmpp_2m",
    "sample_euler", "sample_euler_ancestral", "sample_heun", "sigma_to_t", "sigma_to_timestep",
    "timestep_thresholds",
]

Denoiser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Callback = Optional[Callable[[Dict[str, Any]], None]]


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
    return torch.cat([sigmas, sigmas.new_zeros([1])]).to(device)


def sigma_to_t(sigma: np.float32, alphas_cumprod: np.ndarray) -> float:
    """Fractional diffusion timestep whose ᾱ equals 1/(σ²+1), by linear interpolation in ᾱ.

    `sigma` is the float32 value and ᾱ = 1/(σ²+1) is computed in float32, as the reference does
    with NumPy 2. Out-of-range values clamp to 0 and T−1.
    """
    sigma = np.float32(sigma)
    alpha_cumprod = np.float32(1.0) / (sigma * sigma + np.float32(1.0))
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
    """Wraps a diffusion model into D(x, σ): VE-scaled input -> clipped x̂₀ (docs/behaviour.md#karras-sampler).

    The model sees `x / √(σ²+1)` at the integer timestep `trunc(sigma_to_t(σ))`; its x̂₀ is
    returned as is (not re-derived from σ), exactly like the reference.
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
        c_in = (1.0 / (sigmas**2 + 1) ** 0.5).reshape(-1, *([1] * (x.ndim - 1)))
        out = self.diffusion.p_mean_variance(
            self.model, x * c_in, self.timesteps(sigmas), self.clip_denoised, self.model_kwargs
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


def _to_d(x: torch.Tensor, sigma: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """ODE derivative dx/dσ = (x − x̂₀)/σ (EDM eq. 4 with σ(t) = t)."""
    return (x - denoised) / sigma


def _churn(sigma: float, steps: int, s_churn: float, s_tmin: float, s_tmax: float) -> float:
    return min(s_churn / steps, 2**0.5 - 1) if s_tmin <= sigma <= s_tmax else 0.0


def _levels(sigmas: torch.Tensor) -> List[float]:
    """The σ grid as Python floats, read once before the loop, for the loop's branches."""
    return sigmas.tolist()


def _report(callback: Callback, **info: Any) -> None:
    if callback is not None:
        callback(info)


def sample_heun(
    denoiser: Denoiser,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    generator: GeneratorArg = None,
    progress: bool = False,
    callback: Callback = None,
    s_churn: float = 0.0,
    s_tmin: float = 0.0,
    s_tmax: float = float("inf"),
    s_noise: float = 1.0,
) -> torch.Tensor:
    """Heun's 2nd-order sampler with optional churn (EDM Algorithm 2); 2·steps − 1 evaluations.

    One noise tensor is drawn every step even without churn, as the reference does, so that
    seeded replays consume the RNG identically.
    """
    ones, levels = x.new_ones([x.shape[0]]), _levels(sigmas)
    steps = len(sigmas) - 1
    for i in tqdm(range(steps), disable=not progress):
        gamma = _churn(levels[i], steps, s_churn, s_tmin, s_tmax)
        eps = randn_like(x, generator) * s_noise
        sigma_hat = sigmas[i] * (gamma + 1)
        if gamma > 0:
            x = x + eps * (sigma_hat**2 - sigmas[i] ** 2) ** 0.5
        denoised = denoiser(x, sigma_hat * ones)
        _report(callback, x=x, i=i, sigma=sigmas[i], sigma_hat=sigma_hat, denoised=denoised)
        d = _to_d(x, sigma_hat, denoised)
        dt = sigmas[i + 1] - sigma_hat
        if levels[i + 1] == 0:
            # Euler step: the last step lands on σ = 0, where d₂ is undefined.
            x = x + d * dt
        else:
            # Euler predictor, then trapezoidal (2nd order) correction.
            x_2 = x + d * dt
            denoised_2 = denoiser(x_2, sigmas[i + 1] * ones)
            d_2 = _to_d(x_2, sigmas[i + 1], denoised_2)
            x = x + (d + d_2) / 2 * dt
    return x


def sample_euler(
    denoiser: Denoiser,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    generator: GeneratorArg = None,
    progress: bool = False,
    callback: Callback = None,
    s_churn: float = 0.0,
    s_tmin: float = 0.0,
    s_tmax: float = float("inf"),
    s_noise: float = 1.0,
) -> torch.Tensor:
    """First-order Euler sampler of the probability-flow ODE with optional churn (EDM Alg. 2
    without the correction); one evaluation per step, noise drawn only when churning."""
    ones, levels = x.new_ones([x.shape[0]]), _levels(sigmas)
    steps = len(sigmas) - 1
    for i in tqdm(range(steps), disable=not progress):
        gamma = _churn(levels[i], steps, s_churn, s_tmin, s_tmax)
        sigma_hat = sigmas[i] * (gamma + 1)
        if gamma > 0:
            eps = randn_like(x, generator) * s_noise
            x = x + eps * (sigma_hat**2 - sigmas[i] ** 2) ** 0.5
        denoised = denoiser(x, sigma_hat * ones)
        _report(callback, x=x, i=i, sigma=sigmas[i], sigma_hat=sigma_hat, denoised=denoised)
        x = x + _to_d(x, sigma_hat, denoised) * (sigmas[i + 1] - sigma_hat)
    return x


def _ancestral_step(sigma_from: torch.Tensor, sigma_to: torch.Tensor, eta: float):
    """Split the move σ_from -> σ_to into a deterministic part σ_down and fresh noise σ_up."""
    if not eta:
        return sigma_to, sigma_to * 0
    sigma_up = torch.minimum(
        sigma_to, eta * (sigma_to**2 * (sigma_from**2 - sigma_to**2) / sigma_from**2) ** 0.5
    )
    sigma_down = (sigma_to**2 - sigma_up**2) ** 0.5
    return sigma_down, sigma_up


def sample_euler_ancestral(
    denoiser: Denoiser,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    generator: GeneratorArg = None,
    progress: bool = False,
    callback: Callback = None,
    eta: float = 1.0,
    s_noise: float = 1.0,
) -> torch.Tensor:
    """Euler step to σ_down, then add σ_up fresh noise (ancestral sampling); stochastic."""
    ones, levels = x.new_ones([x.shape[0]]), _levels(sigmas)
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        denoised = denoiser(x, sigmas[i] * ones)
        _report(callback, x=x, i=i, sigma=sigmas[i], sigma_hat=sigmas[i], denoised=denoised)
        sigma_down, sigma_up = _ancestral_step(sigmas[i], sigmas[i + 1], eta)
        x = x + _to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        if levels[i + 1] > 0:
            x = x + randn_like(x, generator) * s_noise * sigma_up
    return x


def sample_dpmpp_2m(
    denoiser: Denoiser,
    x: torch.Tensor,
    sigmas: torch.Tensor,
    generator: GeneratorArg = None,
    progress: bool = False,
    callback: Callback = None,
) -> torch.Tensor:
    """DPM-Solver++(2M) (Lu et al. 2022, Alg. 2): multistep 2nd order in log-σ, deterministic.

    `generator` is accepted for a uniform signature and never used.
    """
    ones, levels = x.new_ones([x.shape[0]]), _levels(sigmas)
    old_denoised = None
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        denoised = denoiser(x, sigmas[i] * ones)
        _report(callback, x=x, i=i, sigma=sigmas[i], sigma_hat=sigmas[i], denoised=denoised)
        if levels[i + 1] == 0:
            # λ = −log σ is infinite at σ = 0; the exact limit of the update is x̂₀ itself.
            x = denoised
        else:
            lam, lam_next = -torch.log(sigmas[i]), -torch.log(sigmas[i + 1])
            h = lam_next - lam
            if old_denoised is None:
                estimate = denoised
            else:
                # Second-order multistep: extrapolate x̂₀ linearly in λ from the previous step.
                r = (lam - (-torch.log(sigmas[i - 1]))) / h
                estimate = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * old_denoised
            x = (sigmas[i + 1] / sigmas[i]) * x - torch.expm1(-h) * estimate
        old_denoised = denoised
    return x


SAMPLERS: Dict[str, Callable[..., torch.Tensor]] = {
    "heun": sample_heun,
    "euler": sample_euler,
    "euler_ancestral": sample_euler_ancestral,
    "dpmpp_2m": sample_dpmpp_2m,
}
