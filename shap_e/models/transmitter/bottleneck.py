"""The latent bottleneck: tanh, plus diffusion noise during training (docs/behaviour.md#bottleneck)."""
from typing import Any, Dict, Optional

import numpy as np
import torch
import torch.nn as nn

from shap_e.util.rng import draw_device


class ClampDiffusionNoiseBottleneck(nn.Module):
    """`tanh(x)`; in training, with probability `diffusion_prob`, noised as `q_sample` at a random t.

    Training with the noise teaches the decoder to tolerate the residual error of the latent
    diffusion model that will later generate these latents.
    """

    def __init__(self, *, diffusion: Dict[str, Any], diffusion_prob: float = 0.1):
        super().__init__()
        from shap_e.diffusion.schedules import get_named_beta_schedule

        schedule_args = dict(diffusion.get("schedule_args") or {})
        betas = get_named_beta_schedule(diffusion["schedule"], diffusion["timesteps"], **schedule_args)
        alphas_cumprod = np.cumprod(1.0 - np.asarray(betas, dtype=np.float64))
        self.register_buffer("sqrt_alphas_cumprod", torch.from_numpy(np.sqrt(alphas_cumprod)).float(), persistent=False)
        self.register_buffer(
            "sqrt_one_minus_alphas_cumprod", torch.from_numpy(np.sqrt(1.0 - alphas_cumprod)).float(), persistent=False
        )
        self.diffusion_prob = diffusion_prob

    def forward(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, ...]` pre-activation latent -> the same shape in (-1, 1) (noised in training)."""
        x = torch.tanh(x)
        if not self.training:
            return x
        batch = x.shape[0]
        timesteps = len(self.sqrt_alphas_cumprod)
        on = draw_device(generator, x.device)
        t = torch.randint(0, timesteps, (batch,), generator=generator, device=on).to(x.device)
        use_noise = torch.rand(batch, generator=generator, device=on).to(x.device) < self.diffusion_prob
        t = torch.where(use_noise, t, torch.zeros_like(t))
        noise = torch.randn(x.shape, generator=generator, device=on, dtype=x.dtype).to(x.device)
        shape = (batch,) + (1,) * (x.dim() - 1)
        a = self.sqrt_alphas_cumprod[t].view(shape)
        s = self.sqrt_one_minus_alphas_cumprod[t].view(shape)
        return a * x + s * noise


def build_bottleneck(config: Optional[Dict[str, Any]]) -> nn.Module:
    """The release's `clamp_diffusion_noise` bottleneck, or a plain tanh without config."""
    if config is None:
        return ClampDiffusionNoiseBottleneck(diffusion={"schedule": "linear", "timesteps": 1}, diffusion_prob=0.0)
    config = dict(config)
    name = config.pop("name", None)
    if name != "clamp_diffusion_noise":
        raise ValueError(f"unknown latent_bottleneck name {name!r}; valid names: ['clamp_diffusion_noise']")
    from shap_e.util.config import check_keys

    check_keys(config, {"diffusion", "diffusion_prob"}, "latent_bottleneck")
    return ClampDiffusionNoiseBottleneck(**config)
