"""The diffusion timestep embedding of the latent diffusion transformers."""
import math

import torch

__all__ = ["timestep_embedding"]


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: int = 10000) -> torch.Tensor:
    """Sinusoidal timestep embedding `[batch] -> [batch, dim]`, cosines first (docs/behaviour.md#timestep-embedding).

    Fractional timesteps are allowed; an odd `dim` gets one trailing zero column.
    """
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    )
    args = timesteps[:, None].to(torch.float32) * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb
