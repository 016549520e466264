"""Latent bottlenecks (what the encoder's output passes through) and latent warps (docs/behaviour.md#bottleneck).

Real home of the official `shap_e.models.transmitter.bottleneck`. The release uses
`clamp_diffusion_noise`: `tanh`, plus, in training, the forward diffusion process at a random
timestep, which teaches the decoder to tolerate the residual error of the latent diffusion model
that will later generate these latents. Its warp is the identity.
"""
import math
from abc import ABC, abstractmethod
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from shap_e.util.collections import AttrDict
from shap_e.util.config import check_keys
from shap_e.util.rng import draw_device

__all__ = [
    "ClampDiffusionNoiseBottleneck", "ClampNoiseBottleneck", "IdentityLatentBottleneck", "IdentityLatentWarp",
    "LatentBottleneck", "LatentWarp", "Tan2LatentWarp", "latent_bottleneck_from_config", "latent_warp_from_config",
]


class LatentBottleneck(nn.Module, ABC):
    """Base of the bottlenecks."""

    def __init__(self, *, device: Optional[torch.device] = None, d_latent: int):
        super().__init__()
        self.device, self.d_latent = device, d_latent

    @abstractmethod
    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, d_latent]` encoder output -> the latent; random draws (training) from `generator`."""


class LatentWarp(nn.Module, ABC):
    """Base of the warps: an invertible elementwise map, `unwarp(warp(x)) == x`."""

    def __init__(self, *, device: Optional[torch.device] = None):
        super().__init__()
        self.device = device

    @abstractmethod
    def warp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        """The bottleneck's output -> the latent that diffusion models."""

    @abstractmethod
    def unwarp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        """The inverse of `warp`."""


class IdentityLatentWarp(LatentWarp):
    """No warp: the latent is the bottleneck's output (the release)."""

    def warp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        return x

    def unwarp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        return x


class Tan2LatentWarp(LatentWarp):
    """`warp(x) = tan(coeff1 * tan(x)) / tan(coeff1 * tan(1))`: maps [-1, 1] onto [-1, 1], spreading
    values near the ends; computed in float32."""

    def __init__(self, *, coeff1: float = 1.0, device: Optional[torch.device] = None):
        super().__init__(device=device)
        if not 0 < coeff1 * math.tan(1.0) < math.pi / 2:
            bound = math.pi / 2 / math.tan(1.0)
            raise ValueError(f"coeff1={coeff1} must lie in (0, {bound:.4f}) for an invertible warp")
        self.coeff1 = coeff1
        self.scale = math.tan(math.tan(1.0) * coeff1)

    def warp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        return ((x.float().tan() * self.coeff1).tan() / self.scale).to(x.dtype)

    def unwarp(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> torch.Tensor:
        return ((x.float() * self.scale).arctan() / self.coeff1).arctan().to(x.dtype)


class IdentityLatentBottleneck(LatentBottleneck):
    """No bottleneck: the latent is the encoder's output (the default without a config)."""

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return x


class ClampNoiseBottleneck(LatentBottleneck):
    """`tanh(x)`; in training plus Gaussian noise of standard deviation `noise_scale`."""

    def __init__(self, *, device: Optional[torch.device] = None, d_latent: int, noise_scale: float):
        super().__init__(device=device, d_latent=d_latent)
        self.noise_scale = noise_scale

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        x = x.tanh()
        if not self.training:
            return x
        noise = torch.randn(x.shape, generator=generator, device=draw_device(generator, x.device), dtype=x.dtype)
        return x + noise.to(x.device) * self.noise_scale


class ClampDiffusionNoiseBottleneck(LatentBottleneck):
    """`tanh(x)`; in training, with probability `diffusion_prob` per row, noised as `q_sample` of the
    `diffusion` process (a diffusion config) at a uniform random timestep (else t = 0)."""

    def __init__(self, *, device: Optional[torch.device] = None, d_latent: int, diffusion: Dict[str, Any],
                 diffusion_prob: float = 1.0):
        super().__init__(device=device, d_latent=d_latent)
        from shap_e.diffusion.gaussian_diffusion import diffusion_from_config

        self.diffusion = diffusion_from_config(diffusion)
        self.diffusion_prob = diffusion_prob

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, ...]` pre-activation latent -> the same shape in (-1, 1) (noised in training).

        Draws (reference order): `randint` of the timesteps, `rand` of the rows to noise, the noise.
        """
        x = torch.tanh(x)
        if not self.training:
            return x
        on = draw_device(generator, x.device)
        t = torch.randint(0, self.diffusion.num_timesteps, (len(x),), generator=generator, device=on).to(x.device)
        use_noise = torch.rand(len(x), generator=generator, device=on).to(x.device) < self.diffusion_prob
        t = torch.where(use_noise, t, torch.zeros_like(t))
        noise = torch.randn(x.shape, generator=generator, device=on, dtype=x.dtype).to(x.device)
        return self.diffusion.q_sample(x, t, noise=noise)


BOTTLENECKS = {"identity": (IdentityLatentBottleneck, set()), "clamp_noise": (ClampNoiseBottleneck, {"noise_scale"}),
               "clamp_diffusion_noise": (ClampDiffusionNoiseBottleneck, {"diffusion", "diffusion_prob"})}
WARPS = {"identity": (IdentityLatentWarp, set()), "tan2": (Tan2LatentWarp, {"coeff1"})}


def _from_config(table: Dict[str, Any], config: Dict[str, Any], what: str, **kwargs: Any) -> nn.Module:
    options = dict(config)
    name = options.pop("name", None)
    if name not in table:
        raise ValueError(f"unknown {what} name {name!r}; valid names: {sorted(table)}")
    cls, allowed = table[name]
    check_keys(options, allowed, f"{what} ({name})")
    return cls(**options, **kwargs)


def latent_bottleneck_from_config(config: Dict[str, Any], device: Optional[torch.device], d_latent: int) -> nn.Module:
    """The bottleneck named by `config["name"]` (`identity`, `clamp_noise`, `clamp_diffusion_noise`)."""
    return _from_config(BOTTLENECKS, config, "latent_bottleneck", device=device, d_latent=d_latent)


def latent_warp_from_config(config: Dict[str, Any], device: Optional[torch.device]) -> nn.Module:
    """The warp named by `config["name"]` (`identity` or `tan2`)."""
    return _from_config(WARPS, config, "latent_warp", device=device)
