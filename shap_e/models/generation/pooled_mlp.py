"""`PooledMLP`: a small point-set diffusion trunk, per-point MLP blocks gated by a pooled summary.

Real home of the official `shap_e.models.generation.pooled_mlp` (not used by the released models).
Each point is processed on its own; the only exchange between points is the gate, computed from the
max (or mean) over all points, which keeps the model permutation-equivariant.
"""
from typing import Optional

import torch
import torch.nn as nn

from shap_e.models.generation.util import timestep_embedding

__all__ = ["POOL_OPS", "PooledMLP", "ResBlock", "pool"]

POOL_OPS = ("max", "mean")


def pool(op_name: str, x: torch.Tensor) -> torch.Tensor:
    """`[batch, channels, n_points]` -> `[batch, channels]`: the max or the mean over the points."""
    if op_name == "max":
        return x.amax(dim=-1)
    if op_name == "mean":
        return x.mean(dim=-1)
    raise ValueError(f"unknown pool op {op_name!r}; valid: {list(POOL_OPS)}")


class ResBlock(nn.Module):
    """`x + body(x) * gate(pool(x))`: `body` is SiLU, LayerNorm, Linear twice, per point; `gate` is
    Linear then tanh of the pooled channels."""

    def __init__(self, hidden_size: int, pool_op: str, device: Optional[torch.device] = None):
        super().__init__()
        if pool_op not in POOL_OPS:
            raise ValueError(f"pool_op={pool_op!r} is unknown; valid: {list(POOL_OPS)}")
        self.pool_op = pool_op
        self.body = nn.Sequential(
            nn.SiLU(), nn.LayerNorm(hidden_size, device=device), nn.Linear(hidden_size, hidden_size, device=device),
            nn.SiLU(), nn.LayerNorm(hidden_size, device=device), nn.Linear(hidden_size, hidden_size, device=device),
        )
        self.gate = nn.Sequential(nn.Linear(hidden_size, hidden_size, device=device), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch, hidden_size, n_points]` -> the same shape."""
        out = self.body(x.permute(0, 2, 1)).permute(0, 2, 1)
        return x + out * self.gate(pool(self.pool_op, x))[..., None]


class PooledMLP(nn.Module):
    """`forward(x [batch, input_channels, n_points], t [batch]) -> [batch, output_channels, n_points]`.

    The timestep embedding (through `time_embed`) is added to every point's input embedding; the
    output convolution starts at zero.
    """

    def __init__(self, device: Optional[torch.device] = None, *, input_channels: int = 3, output_channels: int = 6,
                 hidden_size: int = 256, resblocks: int = 4, pool_op: str = "max"):
        super().__init__()
        self.input_embed = nn.Conv1d(input_channels, hidden_size, kernel_size=1, device=device)
        self.time_embed = nn.Linear(hidden_size, hidden_size, device=device)
        self.sequence = nn.Sequential(*[ResBlock(hidden_size, pool_op, device=device) for _ in range(resblocks)])
        self.out = nn.Conv1d(hidden_size, output_channels, kernel_size=1, device=device)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.input_embed(x)
        h = h + self.time_embed(timestep_embedding(t, h.shape[1]).to(h.dtype))[..., None]
        return self.out(self.sequence(h))
