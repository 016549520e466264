"""ODE/SDE samplers over a Karras σ grid (Karras et al. 2022, "EDM"), each one implementation.

A sampler's steps are a generator `*_steps(denoiser, x, sigmas, generator=None, progress=False,
**options)`: `denoiser(x [batch, d], sigma [batch]) -> x̂₀ [batch, d]`, `x` starts at noise level
`sigmas[0]` and `sigmas` is `[steps + 1]` ending in 0. Each step yields
`{"x", "i", "sigma", "sigma_hat", "pred_xstart"}` (the state before the step's update, after any
churn, and the step's first x̂₀); the last item is `{"x", "pred_xstart"}` with the final sample.
`sample_*(..., callback=None)` runs the steps and returns the final x; `callback` receives a dict
per step with keys `x, i, sigma, sigma_hat, denoised`. `shap_e.diffusion.k_diffusion` exposes the
steps under the official names.

No sampler reads a tensor back to the host inside its loop (no `.item()`, no `if tensor`, no
`.cpu()`): branches use the σ grid read once before the loop, so an accelerator never waits for
the host between model calls.
"""
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from tqdm.auto import tqdm

from shap_e.diffusion.noise import GeneratorArg, randn_like

__all__ = [
    "SAMPLERS", "ancestral_step", "append_dims", "append_zero", "dpm2_steps", "dpmpp_2m_steps",
    "euler_ancestral_steps", "euler_steps", "heun_steps", "sample_dpm2", "sample_dpmpp_2m",
    "sample_euler", "sample_euler_ancestral", "sample_heun", "to_d",
]

Denoiser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Callback = Optional[Callable[[Dict[str, Any]], None]]
Steps = Iterator[Dict[str, Any]]
INF = float("inf")


def append_dims(x: torch.Tensor, target_dims: int) -> torch.Tensor:
    """`x` with trailing singleton dimensions up to `target_dims` dimensions (a view)."""
    missing = target_dims - x.ndim
    if missing < 0:
        raise ValueError(f"x has {x.ndim} dimensions, more than target_dims={target_dims}")
    return x[(...,) + (None,) * missing]


def append_zero(x: torch.Tensor) -> torch.Tensor:
    """`[n] -> [n + 1]`: `x` followed by a 0."""
    return torch.cat([x, x.new_zeros([1])])


def to_d(x: torch.Tensor, sigma: torch.Tensor, denoised: torch.Tensor) -> torch.Tensor:
    """ODE derivative dx/dσ = (x − x̂₀)/σ (EDM eq. 4 with σ(t) = t); σ is a scalar or `[batch]`."""
    return (x - denoised) / (append_dims(sigma, x.ndim) if torch.is_tensor(sigma) else sigma)


def ancestral_step(sigma_from, sigma_to, eta: float = 1.0):
    """Split the move σ_from -> σ_to into a deterministic part σ_down and fresh noise σ_up
    (σ_down² + σ_up² = σ_to²); `eta` scales σ_up (1: ancestral sampling, 0: deterministic)."""
    sigma_up = eta * (sigma_to**2 * (sigma_from**2 - sigma_to**2) / sigma_from**2) ** 0.5
    # σ_up ≤ σ_to for eta ≤ 1 up to rounding; the clamp keeps σ_down real.
    if torch.is_tensor(sigma_up):
        sigma_up = torch.minimum(sigma_up, sigma_to) if torch.is_tensor(sigma_to) else sigma_up.clamp(max=sigma_to)
    else:
        sigma_up = min(sigma_up, sigma_to)
    sigma_down = (sigma_to**2 - sigma_up**2) ** 0.5
    return sigma_down, sigma_up


def _churn(sigma: float, steps: int, s_churn: float, s_tmin: float, s_tmax: float) -> float:
    return min(s_churn / steps, 2**0.5 - 1) if s_tmin <= sigma <= s_tmax else 0.0


def _levels(sigmas: torch.Tensor) -> List[float]:
    """The σ grid as Python floats, read once before the loop, for the loop's branches."""
    return sigmas.tolist()


def _churned_eval(denoiser, x, sigmas, i, levels, ones, generator, churn, draw_always):
    """EDM Alg. 2 lines 4-7: raise σ_i to σ̂ = σ_i(γ+1) by adding noise, then evaluate x̂₀ there.

    `churn` is `(s_churn, s_tmin, s_tmax, s_noise)`; the noise is drawn every step with
    `draw_always`, else only when γ > 0. Returns `(x, σ̂, x̂₀)`.
    """
    s_churn, s_tmin, s_tmax, s_noise = churn
    gamma = _churn(levels[i], len(levels) - 1, s_churn, s_tmin, s_tmax)
    eps = randn_like(x, generator) * s_noise if (draw_always or gamma > 0) else None
    sigma_hat = sigmas[i] * (gamma + 1)
    if gamma > 0:
        x = x + eps * (sigma_hat**2 - sigmas[i] ** 2) ** 0.5
    return x, sigma_hat, denoiser(x, sigma_hat * ones)


def heun_steps(
    denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
    progress: bool = False, s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = INF,
    s_noise: float = 1.0,
) -> Steps:
    """Heun's 2nd-order sampler with optional churn (EDM Algorithm 2); 2·steps − 1 evaluations.

    One noise tensor is drawn every step even without churn, as the reference does, so that
    seeded replays consume the RNG identically.
    """
    ones, levels, churn = x.new_ones([x.shape[0]]), _levels(sigmas), (s_churn, s_tmin, s_tmax, s_noise)
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        x, sigma_hat, denoised = _churned_eval(denoiser, x, sigmas, i, levels, ones, generator, churn, True)
        d = to_d(x, sigma_hat, denoised)
        yield {"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "pred_xstart": denoised}
        dt = sigmas[i + 1] - sigma_hat
        if levels[i + 1] == 0:
            # Euler step: the last step lands on σ = 0, where d₂ is undefined.
            x = x + d * dt
        else:
            # Euler predictor, then trapezoidal (2nd order) correction.
            x_2 = x + d * dt
            d_2 = to_d(x_2, sigmas[i + 1], denoiser(x_2, sigmas[i + 1] * ones))
            x = x + (d + d_2) / 2 * dt
    yield {"x": x, "pred_xstart": denoised}


def dpm2_steps(
    denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
    progress: bool = False, s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = INF,
    s_noise: float = 1.0,
) -> Steps:
    """DPM-Solver-2-like midpoint sampler with EDM churn: each step evaluates x̂₀ at σ̂ and at the
    midpoint σ_mid of a ρ = 3 Karras schedule, then steps with the midpoint slope; 2·steps
    evaluations. One noise draw per step, like `heun_steps`."""
    ones, levels, churn = x.new_ones([x.shape[0]]), _levels(sigmas), (s_churn, s_tmin, s_tmax, s_noise)
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        x, sigma_hat, denoised = _churned_eval(denoiser, x, sigmas, i, levels, ones, generator, churn, True)
        d = to_d(x, sigma_hat, denoised)
        yield {"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "pred_xstart": denoised}
        sigma_mid = ((sigma_hat ** (1 / 3) + sigmas[i + 1] ** (1 / 3)) / 2) ** 3
        x_2 = x + d * (sigma_mid - sigma_hat)
        d_2 = to_d(x_2, sigma_mid, denoiser(x_2, sigma_mid * ones))
        x = x + d_2 * (sigmas[i + 1] - sigma_hat)
    yield {"x": x, "pred_xstart": denoised}


def euler_steps(
    denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
    progress: bool = False, s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = INF,
    s_noise: float = 1.0,
) -> Steps:
    """First-order Euler sampler of the probability-flow ODE with optional churn (EDM Alg. 2
    without the correction); one evaluation per step, noise drawn only when churning."""
    ones, levels, churn = x.new_ones([x.shape[0]]), _levels(sigmas), (s_churn, s_tmin, s_tmax, s_noise)
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        x, sigma_hat, denoised = _churned_eval(denoiser, x, sigmas, i, levels, ones, generator, churn, False)
        yield {"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "pred_xstart": denoised}
        x = x + to_d(x, sigma_hat, denoised) * (sigmas[i + 1] - sigma_hat)
    yield {"x": x, "pred_xstart": denoised}


def euler_ancestral_steps(
    denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
    progress: bool = False, eta: float = 1.0, s_noise: float = 1.0,
) -> Steps:
    """Euler step to σ_down, then add σ_up fresh noise (ancestral sampling); stochastic. Noise is
    drawn every step, also the last one (where σ_up = 0), as the reference does."""
    ones = x.new_ones([x.shape[0]])
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        denoised = denoiser(x, sigmas[i] * ones)
        yield {"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "pred_xstart": denoised}
        sigma_down, sigma_up = ancestral_step(sigmas[i], sigmas[i + 1], eta)
        x = x + to_d(x, sigmas[i], denoised) * (sigma_down - sigmas[i])
        x = x + randn_like(x, generator) * s_noise * sigma_up
    yield {"x": x, "pred_xstart": x}


def dpmpp_2m_steps(
    denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
    progress: bool = False,
) -> Steps:
    """DPM-Solver++(2M) (Lu et al. 2022, Alg. 2): multistep 2nd order in log-σ, deterministic.

    `generator` is accepted for a uniform signature and never used.
    """
    ones, levels = x.new_ones([x.shape[0]]), _levels(sigmas)
    old_denoised = None
    for i in tqdm(range(len(sigmas) - 1), disable=not progress):
        denoised = denoiser(x, sigmas[i] * ones)
        yield {"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "pred_xstart": denoised}
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
    yield {"x": x, "pred_xstart": denoised}


def _final_x(steps: Steps, callback: Callback) -> torch.Tensor:
    """Run `steps`, reporting each step to `callback` (x̂₀ under the key `denoised`); the final x."""
    for info in steps:
        if "i" not in info:
            return info["x"]
        if callback is not None:
            callback({**{k: v for k, v in info.items() if k != "pred_xstart"}, "denoised": info["pred_xstart"]})
    raise RuntimeError("sampler steps ended without a final sample")


def sample_heun(denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
                progress: bool = False, callback: Callback = None, s_churn: float = 0.0, s_tmin: float = 0.0,
                s_tmax: float = INF, s_noise: float = 1.0) -> torch.Tensor:
    """`heun_steps` run to the end: the sample `[batch, d]`."""
    return _final_x(heun_steps(denoiser, x, sigmas, generator, progress, s_churn, s_tmin, s_tmax, s_noise), callback)


def sample_dpm2(denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
                progress: bool = False, callback: Callback = None, s_churn: float = 0.0, s_tmin: float = 0.0,
                s_tmax: float = INF, s_noise: float = 1.0) -> torch.Tensor:
    """`dpm2_steps` run to the end: the sample `[batch, d]`."""
    return _final_x(dpm2_steps(denoiser, x, sigmas, generator, progress, s_churn, s_tmin, s_tmax, s_noise), callback)


def sample_euler(denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
                 progress: bool = False, callback: Callback = None, s_churn: float = 0.0, s_tmin: float = 0.0,
                 s_tmax: float = INF, s_noise: float = 1.0) -> torch.Tensor:
    """`euler_steps` run to the end: the sample `[batch, d]`."""
    return _final_x(euler_steps(denoiser, x, sigmas, generator, progress, s_churn, s_tmin, s_tmax, s_noise), callback)


def sample_euler_ancestral(denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor,
                           generator: GeneratorArg = None, progress: bool = False, callback: Callback = None,
                           eta: float = 1.0, s_noise: float = 1.0) -> torch.Tensor:
    """`euler_ancestral_steps` run to the end: the sample `[batch, d]`."""
    return _final_x(euler_ancestral_steps(denoiser, x, sigmas, generator, progress, eta, s_noise), callback)


def sample_dpmpp_2m(denoiser: Denoiser, x: torch.Tensor, sigmas: torch.Tensor, generator: GeneratorArg = None,
                    progress: bool = False, callback: Callback = None) -> torch.Tensor:
    """`dpmpp_2m_steps` run to the end: the sample `[batch, d]`."""
    return _final_x(dpmpp_2m_steps(denoiser, x, sigmas, generator, progress), callback)


SAMPLERS: Dict[str, Callable[..., torch.Tensor]] = {
    "heun": sample_heun,
    "dpm2": sample_dpm2,
    "euler": sample_euler,
    "euler_ancestral": sample_euler_ancestral,
    "dpmpp_2m": sample_dpmpp_2m,
}
