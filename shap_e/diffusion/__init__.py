"""Latent diffusion: schedules, Gaussian diffusion arithmetic, Karras samplers and `sample_latents`."""
from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion, SpacedDiffusion, diffusion_from_config
from shap_e.diffusion.karras import karras_sigmas
from shap_e.diffusion.presets import SamplingPreset
from shap_e.diffusion.sample import sample_latents
from shap_e.diffusion.samplers import SAMPLERS
from shap_e.diffusion.schedules import get_named_beta_schedule

__all__ = [
    "GaussianDiffusion", "SAMPLERS", "SamplingPreset", "SpacedDiffusion", "diffusion_from_config",
    "get_named_beta_schedule", "karras_sigmas", "sample_latents",
]
