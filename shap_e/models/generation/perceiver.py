"""Perceiver blocks: queries cross-attend to a data sequence (the transmitter encoder's core), and
`PointDiffusionPerceiver`, a diffusion trunk built from them.

Real home of the official `shap_e.models.generation.perceiver` classes. Same parameter layout as the
transformer blocks (`shap_e.models.generation.transformer`): `c_q`, and `c_kv` read per head as
consecutive key/value slices.
"""
import math
from typing import Optional

import torch
import torch.nn as nn

from shap_e.models.generation.transformer import (
    MLP, Transformer, attention, check_heads, init_linear, split_heads, zero_linear,
)
from shap_e.models.generation.util import timestep_embedding

__all__ = [
    "CrossAttention", "MultiheadCrossAttention", "Perceiver", "PointDiffusionPerceiver", "QKVMultiheadCrossAttention",
    "ResidualCrossAttentionBlock", "SimplePerceiver",
]


class QKVMultiheadCrossAttention(nn.Module):
    """Attention of `[batch, n_ctx, heads * d]` queries over `[batch, n_data, heads * 2 * d]` fused
    keys/values (no parameters)."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 heads: int, n_ctx: int, n_data: int):
        super().__init__()
        self.device, self.dtype, self.heads, self.n_ctx, self.n_data = device, dtype, heads, n_ctx, n_data

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        """`[batch, n_ctx, width]`, `[batch, n_data, 2 * width]` -> `[batch, n_ctx, width]`."""
        (q,) = split_heads(q, self.heads, 1)
        k, v = split_heads(kv, self.heads, 2)
        return attention(q, k, v)


class MultiheadCrossAttention(nn.Module):
    """`c_q` (width -> width) on the queries, `c_kv` (data_width -> 2 width) on the data, attention,
    `c_proj`; linears initialised with std `init_scale`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, n_data: int, width: int, heads: int, init_scale: float,
                 data_width: Optional[int] = None):
        super().__init__()
        check_heads(width, heads)
        self.n_ctx, self.n_data, self.width, self.heads = n_ctx, n_data, width, heads
        self.data_width = width if data_width is None else data_width
        self.c_q = nn.Linear(width, width, device=device, dtype=dtype)
        self.c_kv = nn.Linear(self.data_width, width * 2, device=device, dtype=dtype)
        self.c_proj = nn.Linear(width, width, device=device, dtype=dtype)
        self.attention = QKVMultiheadCrossAttention(device=device, dtype=dtype, heads=heads, n_ctx=n_ctx,
                                                    n_data=n_data)
        for layer in (self.c_q, self.c_kv, self.c_proj):
            init_linear(layer, init_scale)

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        """Queries `[batch, n_ctx, width]` attend to `[batch, n_data, data_width]`."""
        return self.c_proj(self.attention(self.c_q(x), self.c_kv(data)))


class ResidualCrossAttentionBlock(nn.Module):
    """Perceiver block: `x + attn(ln_1(x), ln_2(data))`, then `x + mlp(ln_3(x))`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, n_data: int, width: int, heads: int, data_width: Optional[int] = None,
                 init_scale: float = 1.0):
        super().__init__()
        data_width = width if data_width is None else data_width
        self.attn = MultiheadCrossAttention(device=device, dtype=dtype, n_ctx=n_ctx, n_data=n_data, width=width,
                                            heads=heads, data_width=data_width, init_scale=init_scale)
        self.ln_1 = nn.LayerNorm(width, device=device, dtype=dtype)
        self.ln_2 = nn.LayerNorm(data_width, device=device, dtype=dtype)
        self.mlp = MLP(device=device, dtype=dtype, width=width, init_scale=init_scale)
        self.ln_3 = nn.LayerNorm(width, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), self.ln_2(data))
        return x + self.mlp(self.ln_3(x))


class SimplePerceiver(nn.Module):
    """`layers` cross-attention blocks (`resblocks.i`), no self-attention; linears get std
    `init_scale / sqrt(width)`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, n_data: int, width: int, layers: int, heads: int, init_scale: float = 0.25,
                 data_width: Optional[int] = None):
        super().__init__()
        self.n_ctx, self.width, self.layers = n_ctx, width, layers
        std = init_scale / math.sqrt(width)
        self.resblocks = nn.ModuleList(
            ResidualCrossAttentionBlock(device=device, dtype=dtype, n_ctx=n_ctx, n_data=n_data, width=width,
                                        heads=heads, init_scale=std, data_width=data_width)
            for _ in range(layers)
        )

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        """`[batch, n_ctx, width]` queries read `[batch, n_data, data_width]` -> `[batch, n_ctx, width]`."""
        for block in self.resblocks:
            x = block(x, data)
        return x


class PointDiffusionPerceiver(nn.Module):
    """A diffusion trunk through a latent bottleneck: `n_latent` tokens (sinusoidal index
    embeddings through `latent_embed`) read the time-conditioned data tokens (`encoder`), process
    themselves (`processor`), then the data tokens read them back (`decoder`).

    `forward(x [batch, input_channels, n_ctx], t [batch]) -> [batch, output_channels, n_ctx]`.
    """

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 input_channels: int = 3, output_channels: int = 3, n_ctx: int = 1024, n_latent: int = 128,
                 width: int = 512, encoder_layers: int = 12, latent_layers: int = 12, decoder_layers: int = 12,
                 heads: int = 8, init_scale: float = 0.25):
        super().__init__()
        self.n_ctx, self.n_latent, self.width = n_ctx, n_latent, width
        std = init_scale / math.sqrt(width)
        self.time_embed = MLP(device=device, dtype=dtype, width=width, init_scale=std)
        self.latent_embed = MLP(device=device, dtype=dtype, width=width, init_scale=std)
        self.ln_pre = nn.LayerNorm(width, device=device, dtype=dtype)
        common = dict(device=device, dtype=dtype, width=width, heads=heads, init_scale=init_scale)
        self.encoder = SimplePerceiver(n_ctx=n_latent, n_data=n_ctx, layers=encoder_layers, **common)
        self.processor = Transformer(n_ctx=n_latent, layers=latent_layers, **common)
        self.decoder = SimplePerceiver(n_ctx=n_ctx, n_data=n_latent, layers=decoder_layers, **common)
        self.ln_post = nn.LayerNorm(width, device=device, dtype=dtype)
        self.input_proj = nn.Linear(input_channels, width, device=device, dtype=dtype)
        self.output_proj = zero_linear(width, output_channels, device, dtype)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[2] != self.n_ctx:
            raise ValueError(f"x must be [batch, channels, {self.n_ctx}] (n_ctx), got {list(x.shape)}")
        t_embed = self.time_embed(timestep_embedding(t, self.width).to(x.dtype))
        data = self.ln_pre(self.input_proj(x.permute(0, 2, 1)) + t_embed[:, None])
        index = torch.arange(self.n_latent, device=x.device)
        h = self.latent_embed(timestep_embedding(index, self.width).to(x.dtype))[None].expand(len(x), -1, -1)
        h = self.processor(self.encoder(h, data))
        h = self.ln_post(self.decoder(data, h))
        return self.output_proj(h).permute(0, 2, 1)


# The names these classes had before they took the official ones.
CrossAttention = MultiheadCrossAttention
Perceiver = SimplePerceiver
