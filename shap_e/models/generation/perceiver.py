"""Perceiver blocks: latent queries cross-attend to a data sequence (the transmitter encoder's core).

Same parameter layout as the transformer blocks (`shap_e.models.generation.transformer`): `c_q`, and
`c_kv` read per head as consecutive key/value slices.
"""
import torch
import torch.nn as nn

from shap_e.models.generation.transformer import MLP, attention, init_linear, is_meta, split_heads

__all__ = ["CrossAttention", "Perceiver", "ResidualCrossAttentionBlock"]


class CrossAttention(nn.Module):
    def __init__(self, width: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        if width % heads:
            raise ValueError(f"width={width} must be divisible by heads={heads}")
        self.heads = heads
        self.c_q = nn.Linear(width, width, device=device)
        self.c_kv = nn.Linear(width, width * 2, device=device)
        self.c_proj = nn.Linear(width, width, device=device)
        if not is_meta(device):
            for layer in (self.c_q, self.c_kv, self.c_proj):
                init_linear(layer, init_scale, width)

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        """Queries `[batch, n_ctx, width]` attend to `[batch, n_data, width]`."""
        (q,) = split_heads(self.c_q(x), self.heads, 1)
        k, v = split_heads(self.c_kv(data), self.heads, 2)
        return self.c_proj(attention(q, k, v))


class ResidualCrossAttentionBlock(nn.Module):
    """Perceiver block: `x + attn(ln_1(x), ln_2(data))`, then `x + mlp(ln_3(x))`."""

    def __init__(self, width: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        self.attn = CrossAttention(width, heads, init_scale, device=device)
        self.ln_1 = nn.LayerNorm(width, device=device)
        self.ln_2 = nn.LayerNorm(width, device=device)
        self.mlp = MLP(width, init_scale, device=device)
        self.ln_3 = nn.LayerNorm(width, device=device)

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), self.ln_2(data))
        return x + self.mlp(self.ln_3(x))


class Perceiver(nn.Module):
    """`layers` cross-attention blocks (`resblocks.i`): latent queries read a data sequence."""

    def __init__(self, width: int, layers: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        self.resblocks = nn.ModuleList(
            ResidualCrossAttentionBlock(width, heads, init_scale, device=device) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, data)
        return x
