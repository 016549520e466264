"""The latent diffusion transformers and their pre-LayerNorm blocks (docs/behaviour.md#diffusion-transformers).

Blocks: the attention projections use the reference's per-head interleaved layout: the `3 * width`
features of `c_qkv` are viewed as `[heads, 3 * head_dim]`, so that for head `j` the query, key and
value are consecutive slices. Attention runs through `scaled_dot_product_attention`, which is
the same maths as `softmax(q k^T / sqrt(d)) v` (the fused kernel is faster and uses less memory).

Trunks: a latent of `d_latent = n_ctx * channels` numbers is read token-major (element
`n * channels + c` is channel `c` of token `n`), projected to `width`, prefixed with conditioning
tokens and run through the transformer. The output has `2 * channels` per token: the x0 prediction
and the learned-range variance value.
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from shap_e.models.generation.util import timestep_embedding


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


CLIP_TEXT_WIDTH = 768
CLIP_GRID_CHANNELS = 1024
CLIP_GRID_TOKENS = 256
# Text/image encoders a prior can be configured with (`conditioner:` in its config). "minilm" gives a
# text-conditioned inner model one pooled MiniLM vector per caption; "minilm_tokens" gives a grid inner
# model MiniLM's token states as a [384, grid_tokens] grid. "grid_encoder" is a small image encoder the
# prior owns and trains (`shap_e.models.image_encoder`).
CONDITIONERS = ("clip", "minilm", "minilm_tokens", "grid_encoder")


class PointDiffusionTransformer(nn.Module):
    """The shared trunk; subclasses add a conditioning projection `clip_embed`."""

    def __init__(
        self,
        *,
        input_channels: int,
        output_channels: int,
        n_ctx: int,
        width: int = 512,
        layers: int = 12,
        heads: int = 8,
        init_scale: float = 0.25,
        time_token_cond: bool = False,
        use_pos_emb: bool = False,
        pos_emb_init_scale: float = 1.0,
        cond_drop_prob: float = 0.0,
        device=None,
    ):
        super().__init__()
        self.input_channels = input_channels
        self.output_channels = output_channels
        self.n_ctx = n_ctx
        self.width = width
        self.time_token_cond = time_token_cond
        self.cond_drop_prob = cond_drop_prob
        if use_pos_emb:
            self.pos_emb = nn.Parameter(torch.empty(n_ctx, width, device=device))
            if not is_meta(device):
                nn.init.normal_(self.pos_emb, std=pos_emb_init_scale)
        else:
            self.pos_emb = None
        self.time_embed = MLP(width, init_scale, device=device)
        self.ln_pre = nn.LayerNorm(width, device=device)
        self.backbone = Transformer(width, layers, heads, init_scale, device=device)
        self.ln_post = nn.LayerNorm(width, device=device)
        self.input_proj = nn.Linear(input_channels, width, device=device)
        self.output_proj = nn.Linear(width, output_channels, device=device)
        if not is_meta(device):
            nn.init.zeros_(self.output_proj.weight)
            nn.init.zeros_(self.output_proj.bias)

    def embed_time(self, t: torch.Tensor) -> torch.Tensor:
        """`[batch]` (integer or fractional) timesteps -> `[batch, width]`."""
        return self.time_embed(timestep_embedding(t, self.width).to(self.input_proj.weight.dtype))

    def drop_conditioning(self, cond: torch.Tensor) -> torch.Tensor:
        """Classifier-free-guidance dropout: in training, zero each row with `cond_drop_prob`."""
        if not self.training or self.cond_drop_prob <= 0:
            return cond
        keep = torch.rand(cond.shape[0], device=cond.device) >= self.cond_drop_prob
        return cond * keep.view(-1, *([1] * (cond.dim() - 1))).to(cond.dtype)

    def forward_with_cond(self, x: torch.Tensor, conds: List[Tuple[torch.Tensor, bool]]) -> torch.Tensor:
        """Run the trunk (docs/behaviour.md#sequence-assembly).

        :param x: `[batch, channels, n_ctx]` latent tokens (channel-major).
        :param conds: `(embedding, as_token)` pairs; `[batch, width]` or `[batch, k, width]`.
            Non-token conditionings are added to every latent token, token ones are prepended.
        :return: `[batch, output_channels, n_ctx]`.
        """
        h = self.input_proj(x.permute(0, 2, 1))
        for emb, as_token in conds:
            if not as_token:
                h = h + emb[:, None]
        if self.pos_emb is not None:
            h = h + self.pos_emb.to(h.dtype)
        tokens = [emb[:, None] if emb.dim() == 2 else emb for emb, as_token in conds if as_token]
        if tokens:
            h = torch.cat([*[tok.to(h.dtype) for tok in tokens], h], dim=1)
        h = self.ln_post(self.backbone(self.ln_pre(h)))
        h = h[:, h.shape[1] - self.n_ctx :]
        return self.output_proj(h).permute(0, 2, 1)


class TextConditionedTransformer(PointDiffusionTransformer):
    """text300M's trunk: one CLIP text/image embedding `[batch, 768]` (docs/behaviour.md#text-conditioning)."""

    conditioning = "text"

    def __init__(self, *, token_cond: bool = False, cond_width: int = CLIP_TEXT_WIDTH, device=None, **kwargs):
        super().__init__(device=device, **kwargs)
        self.token_cond = token_cond
        self.cond_width = cond_width
        self.clip_embed = nn.Linear(cond_width, self.width, device=device)

    def forward(self, x: torch.Tensor, t: torch.Tensor, embeddings: Optional[torch.Tensor] = None):
        """`[batch, channels, n_ctx]`, `[batch]`, `[batch, cond_width]` (None: zeros) -> `[batch, 2 channels, n_ctx]`.

        `cond_width` is 768 for CLIP ViT-L/14 (the release); unit-norm embeddings are scaled by
        `sqrt(cond_width)` so that their features have unit variance.
        """
        if embeddings is None:
            embeddings = torch.zeros(x.shape[0], self.cond_width, device=x.device)
        clip_out = self.drop_conditioning(embeddings.to(device=x.device, dtype=torch.float32))
        clip_embed = self.clip_embed(math.sqrt(self.cond_width) * clip_out.to(self.clip_embed.weight.dtype))
        conds = [(clip_embed, self.token_cond), (self.embed_time(t), self.time_token_cond)]
        return self.forward_with_cond(x, conds)


class ImageGridConditionedTransformer(PointDiffusionTransformer):
    """image300M's trunk: a CLIP ViT-L/14 patch grid `[batch, 1024, 256]` as 256 tokens
    (docs/behaviour.md#image-grid-conditioning).

    Any grid of feature tokens fits (`grid_channels` x `grid_tokens`): the small image encoder's
    patches, or a caption's MiniLM token states (`conditioner: minilm_tokens`).
    """

    conditioning = "image_grid"

    def __init__(
        self, *, grid_channels: int = CLIP_GRID_CHANNELS, grid_tokens: int = CLIP_GRID_TOKENS, device=None, **kwargs
    ):
        super().__init__(device=device, **kwargs)
        self.grid_shape = (grid_channels, grid_tokens)
        self.clip_embed = nn.Sequential(
            nn.LayerNorm(grid_channels, device=device),
            nn.Linear(grid_channels, self.width, device=device),
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor, embeddings: Optional[torch.Tensor] = None):
        """`[batch, channels, n_ctx]`, `[batch]`, `[batch, grid_channels, grid_tokens]` -> `[batch, 2 channels, n_ctx]`.

        The release grid is CLIP ViT-L/14's: 1024 channels x 256 patches.
        """
        if embeddings is None:
            embeddings = torch.zeros(x.shape[0], *self.grid_shape, device=x.device)
        grid = self.drop_conditioning(embeddings.to(device=x.device, dtype=torch.float32))
        grid = self.clip_embed(grid.permute(0, 2, 1).to(self.input_proj.weight.dtype))
        conds = [(self.embed_time(t), self.time_token_cond), (grid, True)]
        return self.forward_with_cond(x, conds)
