"""Pre-LayerNorm transformer blocks with the Shap-E parameter layout (docs/behaviour.md#transformer-blocks).

The attention projections use the reference's per-head interleaved layout: the `3 * width`
features of `c_qkv` are viewed as `[heads, 3 * head_dim]`, so that for head `j` the query, key and
value are consecutive slices. Attention runs through `scaled_dot_product_attention`, which is
the same maths as `softmax(q k^T / sqrt(d)) v` (the fused kernel is faster and uses less memory).
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


def init_linear(layer: nn.Linear, init_scale: float, width: int) -> None:
    """Training-time init of transformer linears: `N(0, (init_scale / sqrt(width))^2)`, zero bias."""
    nn.init.normal_(layer.weight, std=init_scale / math.sqrt(width))
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def is_meta(device) -> bool:
    """Modules built on the `meta` device skip random init (no memory, no time)."""
    return device is not None and torch.device(device).type == "meta"


class MLP(nn.Module):
    """`c_fc` (width -> 4 width), exact GELU, `c_proj` (4 width -> width)."""

    def __init__(self, width: int, init_scale: float = 0.25, device=None):
        super().__init__()
        self.c_fc = nn.Linear(width, width * 4, device=device)
        self.c_proj = nn.Linear(width * 4, width, device=device)
        if not is_meta(device):
            init_linear(self.c_fc, init_scale, width)
            init_linear(self.c_proj, init_scale, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


def split_heads(x: torch.Tensor, heads: int, parts: int) -> list:
    """`[batch, n_ctx, heads * parts * d]` -> `parts` tensors of `[batch, heads, n_ctx, d]`.

    Features are head-major: head j owns `x[..., j * parts * d : (j + 1) * parts * d]`. The parts are
    taken with one `unbind`, whose backward stacks their gradients into one tensor (indexing each part
    would allocate and zero a full-size gradient per part).
    """
    batch, n_ctx, features = x.shape
    x = x.view(batch, n_ctx, heads, parts, features // (heads * parts))
    return [part.transpose(1, 2) for part in x.unbind(3)]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`[batch, heads, n_q, d]` queries over `[batch, heads, n_kv, d]` -> `[batch, n_q, heads * d]`."""
    out = F.scaled_dot_product_attention(q, k, v)
    batch, heads, n_q, d = out.shape
    return out.transpose(1, 2).reshape(batch, n_q, heads * d)


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        if width % heads:
            raise ValueError(f"width={width} must be divisible by heads={heads}")
        self.heads = heads
        self.c_qkv = nn.Linear(width, width * 3, device=device)
        self.c_proj = nn.Linear(width, width, device=device)
        if not is_meta(device):
            init_linear(self.c_qkv, init_scale, width)
            init_linear(self.c_proj, init_scale, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch, n_ctx, width]` -> `[batch, n_ctx, width]`."""
        q, k, v = split_heads(self.c_qkv(x), self.heads, 3)
        return self.c_proj(attention(q, k, v))


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


class ResidualAttentionBlock(nn.Module):
    """`x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`."""

    def __init__(self, width: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        self.attn = SelfAttention(width, heads, init_scale, device=device)
        self.ln_1 = nn.LayerNorm(width, device=device)
        self.mlp = MLP(width, init_scale, device=device)
        self.ln_2 = nn.LayerNorm(width, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


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


class Transformer(nn.Module):
    """`layers` residual self-attention blocks in sequence (`resblocks.i`), no final LayerNorm."""

    def __init__(self, width: int, layers: int, heads: int, init_scale: float = 0.25, device=None):
        super().__init__()
        self.resblocks = nn.ModuleList(
            ResidualAttentionBlock(width, heads, init_scale, device=device) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x)
        return x


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
