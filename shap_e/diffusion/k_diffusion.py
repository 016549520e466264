"""The official `shap_e.diffusion.k_diffusion` (after Crowson's k-diffusion): an adapter with the
official names and signatures over the one implementation of each piece: the samplers in
`shap_e.diffusion.samplers`, the σ grid and the Gaussian -> Karras denoiser in
`shap_e.diffusion.karras`. `KarrasDenoiser` (EDM preconditioning, for models trained directly in σ)
exists only here.

As in the official code, `sample_heun`, `sample_dpm` and `sample_euler_ancestral` are generators
that yield a dict per step, `{"x", "i", "sigma", "sigma_hat", "pred_xstart"}` (`sample_dpm`: the x̂₀
under `"denoised"`), then `{"x", "pred_xstart"}` with the final sample; they run without gradients.
Extras: a keyword-only `generator` for every random draw, and `karras_sample_progressive` also
takes the `sampler` names of `shap_e.diffusion.samplers.SAMPLERS` ("euler", "dpmpp_2m", ...).
"""
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import torch

from shap_e.diffusion import samplers
from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion, mean_flat
from shap_e.diffusion.karras import KarrasDenoiser as _GaussianDenoiser
from shap_e.diffusion.karras import guided_denoiser, karras_sigmas, sigma_to_t
from shap_e.diffusion.noise import GeneratorArg, model_device, randn
from shap_e.diffusion.samplers import append_dims, append_zero, to_d

__all__ = [
    "GaussianToKarrasDenoiser", "KarrasDenoiser", "append_dims", "append_zero", "get_ancestral_step",
    "get_sigmas_karras", "karras_sample", "karras_sample_progressive", "sample_dpm",
    "sample_euler_ancestral", "sample_heun", "to_d",
]

INF = float("inf")


class KarrasDenoiser:
    """EDM preconditioning (Karras et al. 2022, Table 1): D(x, σ) = c_skip x + c_out F(c_in x, ¼ ln σ)
    for a network F trained on data of standard deviation `sigma_data`."""

    def __init__(self, sigma_data: float = 0.5):
        self.sigma_data = sigma_data

    def get_snr(self, sigmas: torch.Tensor) -> torch.Tensor:
        """Signal-to-noise ratio σ⁻²."""
        return sigmas**-2

    def get_sigmas(self, sigmas: torch.Tensor) -> torch.Tensor:
        """The noise levels themselves (this parameterisation works in σ)."""
        return sigmas

    def get_scalings(self, sigma: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(c_skip, c_out, c_in)` at noise level σ."""
        c_skip = self.sigma_data**2 / (sigma**2 + self.sigma_data**2)
        c_out = sigma * self.sigma_data / (sigma**2 + self.sigma_data**2) ** 0.5
        c_in = 1 / (sigma**2 + self.sigma_data**2) ** 0.5
        return c_skip, c_out, c_in

    def training_losses(
        self, model: Callable[..., torch.Tensor], x_start: torch.Tensor, sigmas: torch.Tensor,
        model_kwargs: Optional[Dict[str, Any]] = None, noise: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """`mse` of F against its effective target (x₀ − c_skip x_σ)/c_out, `xs_mse` of D against
        x₀, and `loss` = `mse`; each `[batch]` for `x_start` `[batch, ...]` noised to `sigmas` `[batch]`."""
        if noise is None:
            noise = torch.randn_like(x_start)
        dims = x_start.ndim
        x_t = x_start + noise * append_dims(sigmas, dims)
        c_skip, c_out, _ = (append_dims(c, dims) for c in self.get_scalings(sigmas))
        model_output, denoised = self.denoise(model, x_t, sigmas, **(model_kwargs or {}))
        target = (x_start - c_skip * x_t) / c_out
        mse = mean_flat((model_output - target) ** 2)
        return {"mse": mse, "xs_mse": mean_flat((denoised - x_start) ** 2), "loss": mse}

    def denoise(
        self, model: Callable[..., torch.Tensor], x_t: torch.Tensor, sigmas: torch.Tensor, **model_kwargs: Any
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """`(F's output, D(x_t, σ))`; F sees `c_in x_t` and the time 250 ln σ (`[batch]`)."""
        c_skip, c_out, c_in = (append_dims(c, x_t.ndim) for c in self.get_scalings(sigmas))
        rescaled_t = 1000 * 0.25 * torch.log(sigmas + 1e-44)
        model_output = model(c_in * x_t, rescaled_t, **model_kwargs)
        return model_output, c_out * model_output + c_skip * x_t


class GaussianToKarrasDenoiser:
    """A `GaussianDiffusion` model as a Karras denoiser: D(x, σ) is the model's x̂₀ for the VP input
    x/√(σ²+1) at the timestep whose ᾱ is 1/(σ²+1), truncated (docs/behaviour.md#karras-sampler)."""

    def __init__(self, model: Callable[..., torch.Tensor], diffusion: GaussianDiffusion):
        self.model = model
        self.diffusion = diffusion
        self._denoiser = _GaussianDenoiser(model, diffusion)

    def sigma_to_t(self, sigma: float) -> float:
        """The fractional timestep of noise level `sigma` (interpolated in ᾱ, clamped to [0, T−1])."""
        return sigma_to_t(sigma, self.diffusion.alphas_cumprod)

    def denoise(
        self, x_t: torch.Tensor, sigmas: torch.Tensor, clip_denoised: bool = True,
        model_kwargs: Optional[Dict[str, Any]] = None,
    ) -> Tuple[None, torch.Tensor]:
        """`(None, x̂₀ [batch, d])` for `x_t` `[batch, d]` at noise levels `sigmas` `[batch]`."""
        return None, self._denoiser.pred_xstart(x_t, sigmas, clip_denoised, model_kwargs)


def get_sigmas_karras(
    n: int, sigma_min: float, sigma_max: float, rho: float = 7.0, device: Optional[torch.device] = "cpu"
) -> torch.Tensor:
    """The Karras noise levels `[n + 1]` (float32, ending in 0) on `device` (EDM eq. 5)."""
    return karras_sigmas(n, sigma_min, sigma_max, rho, device=device)


def get_ancestral_step(sigma_from, sigma_to):
    """`(σ_down, σ_up)` of an ancestral step σ_from -> σ_to: the deterministic part and the noise."""
    return samplers.ancestral_step(sigma_from, sigma_to)


@torch.no_grad()
def sample_heun(
    denoiser: Callable[..., torch.Tensor], x: torch.Tensor, sigmas: torch.Tensor, progress: bool = False,
    s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = INF, s_noise: float = 1.0,
    *, generator: GeneratorArg = None,
) -> Iterator[Dict[str, Any]]:
    """Heun's sampler (EDM Algorithm 2), step by step; see `samplers.heun_steps`."""
    yield from samplers.heun_steps(denoiser, x, sigmas, generator, progress, s_churn, s_tmin, s_tmax, s_noise)


@torch.no_grad()
def sample_dpm(
    denoiser: Callable[..., torch.Tensor], x: torch.Tensor, sigmas: torch.Tensor, progress: bool = False,
    s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = INF, s_noise: float = 1.0,
    *, generator: GeneratorArg = None,
) -> Iterator[Dict[str, Any]]:
    """The DPM-Solver-2-like midpoint sampler, step by step (x̂₀ under `"denoised"` in the step
    dicts, as in the official code); see `samplers.dpm2_steps`."""
    for step in samplers.dpm2_steps(denoiser, x, sigmas, generator, progress, s_churn, s_tmin, s_tmax, s_noise):
        if "i" in step:
            step["denoised"] = step.pop("pred_xstart")
        yield step


@torch.no_grad()
def sample_euler_ancestral(
    model: Callable[..., torch.Tensor], x: torch.Tensor, sigmas: torch.Tensor, progress: bool = False,
    *, generator: GeneratorArg = None,
) -> Iterator[Dict[str, Any]]:
    """Ancestral sampling with Euler steps, step by step; see `samplers.euler_ancestral_steps`."""
    yield from samplers.euler_ancestral_steps(model, x, sigmas, generator, progress)


# The official sampler names, then this package's (`samplers.SAMPLERS`); True: takes the churn options.
_STEPS = {
    "heun": (sample_heun, True), "dpm": (sample_dpm, True), "ancestral": (sample_euler_ancestral, False),
    "dpm2": (sample_dpm, True), "euler_ancestral": (sample_euler_ancestral, False),
    "euler": (torch.no_grad()(samplers.euler_steps), True),
    "dpmpp_2m": (torch.no_grad()(samplers.dpmpp_2m_steps), False),
}


def karras_sample(*args: Any, **kwargs: Any) -> torch.Tensor:
    """The final sample of `karras_sample_progressive` (same arguments)."""
    last = None
    for step in karras_sample_progressive(*args, **kwargs):
        last = step["x"]
    return last


def karras_sample_progressive(
    diffusion: Any, model: Callable[..., torch.Tensor], shape: Sequence[int], steps: int,
    clip_denoised: bool = True, progress: bool = False, model_kwargs: Optional[Dict[str, Any]] = None,
    device: Optional[torch.device] = None, sigma_min: float = 0.002, sigma_max: float = 80,
    rho: float = 7.0, sampler: str = "heun", s_churn: float = 0.0, s_tmin: float = 0.0,
    s_tmax: float = INF, s_noise: float = 1.0, guidance_scale: float = 0.0,
    *, generator: GeneratorArg = None,
) -> Iterator[Dict[str, Any]]:
    """Sample `shape` (e.g. `[batch, d]`) over `steps` Karras noise levels from x_T = σ_max·N(0, I),
    yielding the sampler's step dicts (their x and x̂₀ mapped back to data space by a
    `GaussianDiffusion`'s channel scaling).

    `diffusion` is a `GaussianDiffusion` (the model predicts its mean/variance output) or a
    `KarrasDenoiser` (the model is the preconditioned network). `guidance_scale` not 0 or 1 runs
    classifier-free guidance: `model_kwargs` must hold the conditional rows, then as many
    unconditional ones.
    """
    if sampler not in _STEPS:
        raise ValueError(f"sampler={sampler!r} is unknown; use one of {sorted(_STEPS)}")
    step_fn, churns = _STEPS[sampler]
    if s_churn and not churns:
        raise ValueError(f"sampler {sampler!r} does not churn; use s_churn=0.0 or sampler='heun'")
    device = model_device(model) if device is None else device
    sigmas = karras_sigmas(steps, sigma_min, sigma_max, rho, device=device)
    x_T = randn(shape, generator, device=device) * sigma_max
    denoiser = _denoiser(diffusion, model, clip_denoised, model_kwargs)
    if guidance_scale not in (0.0, 1.0):
        denoiser = guided_denoiser(denoiser, guidance_scale)
    options = dict(s_churn=s_churn, s_tmin=s_tmin, s_tmax=s_tmax, s_noise=s_noise) if churns else {}
    for step in step_fn(denoiser, x_T, sigmas, progress=progress, generator=generator, **options):
        if isinstance(diffusion, GaussianDiffusion):
            step = {k: diffusion.unscale_channels(v) if k in ("x", "pred_xstart", "denoised") else v
                    for k, v in step.items()}
        yield step


def _denoiser(diffusion: Any, model, clip_denoised: bool, model_kwargs) -> Callable[..., torch.Tensor]:
    """D(x, σ) -> x̂₀ for a `GaussianDiffusion` or a `KarrasDenoiser`."""
    if isinstance(diffusion, GaussianDiffusion):
        return _GaussianDenoiser(model, diffusion, clip_denoised, model_kwargs)
    if not isinstance(diffusion, KarrasDenoiser):
        raise TypeError(f"diffusion must be a GaussianDiffusion or a KarrasDenoiser, got {type(diffusion).__name__}")

    def denoise(x_t: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        _, denoised = diffusion.denoise(model, x_t, sigma, **(model_kwargs or {}))
        return denoised.clamp(-1, 1) if clip_denoised else denoised

    return denoise
