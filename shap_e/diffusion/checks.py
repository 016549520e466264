"""What `sample_latents` checks before and after sampling, so that nothing non-finite leaves it.

Before: every number is finite and in range (named in the error), the conditioning texts are
strings, the diffusion matches the one the model was trained with, and the batch fits in memory.
After: the latents hold no NaN or infinity.
"""
from typing import Any, Dict, Optional

import numpy as np
import torch

from shap_e.util.checks import check_finite, check_int, check_number
from shap_e.util.errors import InvalidArgumentError
from shap_e.util.memory import check_fits

__all__ = [
    "GUIDANCE_LIMIT", "MAX_STEPS", "SIGMA_LIMIT", "check_diffusion_matches", "check_sample_memory", "check_sampled",
    "check_sampling_numbers", "check_texts", "sample_memory_bytes",
]

GUIDANCE_LIMIT = 1000.0  # |guidance_scale|; the official notebooks use 3 and 15
SIGMA_LIMIT = 1e4  # sigma_max; the official schedule ends at 160
MAX_STEPS = 10_000


def check_sampling_numbers(guidance_scale: Any, karras_steps: Any, sigma_min: Any, sigma_max: Any, s_churn: Any,
                           use_karras: bool, strength: Any) -> None:
    """Raise InvalidArgumentError naming the first number that is not finite or out of range."""
    check_number(guidance_scale, "guidance_scale", -GUIDANCE_LIMIT, GUIDANCE_LIMIT)
    if not use_karras:
        return
    check_int(karras_steps, "karras_steps", 2, MAX_STEPS)
    check_number(sigma_min, "sigma_min", 0, SIGMA_LIMIT, low_open=True)
    check_number(sigma_max, "sigma_max", 0, SIGMA_LIMIT, low_open=True)
    if not sigma_min < sigma_max:
        raise InvalidArgumentError(f"sigma_min must be below sigma_max, got sigma_min={sigma_min:g} and "
                                   f"sigma_max={sigma_max:g}")
    check_number(s_churn or 0.0, "s_churn", 0, None)
    if strength is not None:
        check_number(strength, "strength", 0, 1, low_open=True)


def check_texts(model_kwargs: Dict[str, Any]) -> None:
    """`texts=` must be a list of strings (an empty string conditions on nothing)."""
    texts = model_kwargs.get("texts")
    if texts is None:
        return
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        bad = texts if isinstance(texts, str) else next(t for t in texts if not isinstance(t, str))
        raise InvalidArgumentError(f"model_kwargs['texts'] must be a list of strings, one per sample; found {bad!r}")


def _mean_type(diffusion: Any) -> Optional[str]:
    value = getattr(diffusion, "mean_type", None) or getattr(diffusion, "model_mean_type", None)
    return getattr(value, "value", value) if value is not None else None


def check_diffusion_matches(model: Any, diffusion: Any) -> None:
    """Raise when `diffusion` is not the process the model was trained with.

    `shap_e.models.download.load_model` records a prior's diffusion (its registry entry's
    `diffusion` config) as `model.diffusion_config` and its name as `model.diffusion_name`; a model
    built another way is not checked. The prediction type and the noise levels must agree.
    """
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config

    expected = getattr(model, "diffusion_config", None)
    if expected is None:
        return
    reference = diffusion_from_config(expected)
    same = _mean_type(reference) == _mean_type(diffusion)
    ours, theirs = getattr(reference, "alphas_cumprod", None), getattr(diffusion, "alphas_cumprod", None)
    if same and ours is not None and theirs is not None:
        kept = getattr(diffusion, "timestep_map", None)
        ours = ours[np.asarray(kept)] if kept is not None and len(kept) == len(theirs) else ours
        same = len(ours) == len(theirs) and np.allclose(ours, theirs, rtol=1e-6, atol=1e-12)
    if not same:
        name = getattr(model, "diffusion_name", "its own")
        raise InvalidArgumentError(
            f"this model was trained with the {name!r} diffusion ({expected.get('schedule')} schedule, "
            f"{expected.get('mean_type', 'epsilon')} prediction) but the diffusion passed predicts "
            f"{_mean_type(diffusion)}: build it with diffusion_from_config(load_config({name!r}))"
        )


def sample_memory_bytes(batch_size: int, d_latent: int) -> float:
    """A generous estimate of the memory `sample_latents` needs for `batch_size` latents of `d_latent`
    numbers: the sampler's float32 copies and the model's activations on conditional and
    unconditional rows (about 32 latent-sized tensors per row)."""
    return 2 * batch_size * d_latent * 4 * 32


def check_sample_memory(batch_size: int, d_latent: int, device: torch.device) -> None:
    check_fits(sample_memory_bytes(batch_size, d_latent), f"batch_size={batch_size}",
               "sample fewer latents at a time", device)


def check_sampled(latents: torch.Tensor, guidance_scale: float) -> torch.Tensor:
    """`latents`, after refusing them if they hold NaN or infinity (saying what to change)."""
    check_finite(latents, "the sampled latents",
                 f"lower guidance_scale (it was {guidance_scale:g}) or check that the model, its diffusion "
                 "config and its dtype belong together")
    return latents
