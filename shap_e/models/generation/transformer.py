"""The latent diffusion transformers and their pre-LayerNorm blocks (docs/behaviour.md#diffusion-transformers).

Real home of the official `shap_e.models.generation.transformer` classes, with their constructors.

Blocks: the attention projections use the reference's per-head interleaved layout: the `3 * width`
features of `c_qkv` are viewed as `[heads, 3 * head_dim]`, so that for head `j` the query, key and
value are consecutive slices. Attention runs through `scaled_dot_product_attention`, which is
the same maths as `softmax(q k^T / sqrt(d)) v` (the fused kernel is faster and uses less memory).

Trunks: `x [batch, channels, n_ctx]` tokens are projected to `width`, conditioning embeddings are
added to every token or prepended as extra tokens, and the transformer's last `n_ctx` outputs are
projected back (`[batch, output_channels, n_ctx]`). The conditioned trunks embed texts and images
with a lazily loaded frozen CLIP (`self.clip`, `shap_e.models.generation.pretrained_clip`).
"""
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from shap_e.models.conditioning import conditioning_embeddings
from shap_e.models.generation.pretrained_clip import FrozenImageCLIP, ImageCLIP
from shap_e.models.generation.util import timestep_embedding

__all__ = [
    "CLIPImageGridPointDiffusionTransformer", "CLIPImageGridUpsamplePointDiffusionTransformer",
    "CLIPImagePointDiffusionTransformer", "CONDITIONERS", "ImageGridConditionedTransformer", "MLP",
    "MultiheadAttention", "PointDiffusionTransformer", "QKVMultiheadAttention", "ResidualAttentionBlock",
    "SelfAttention", "TextConditionedTransformer", "Transformer", "UpsamplePointDiffusionTransformer",
    "attention", "init_linear", "split_heads",
]


def init_linear(l: nn.Linear, stddev: float) -> None:
    """Training-time init of the transformer linears: weight `N(0, stddev^2)`, zero bias."""
    nn.init.normal_(l.weight, std=stddev)
    if l.bias is not None:
        nn.init.zeros_(l.bias)


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


def zero_linear(in_features: int, out_features: int, device=None, dtype=None) -> nn.Linear:
    """A linear layer that starts at zero (the trunks' `output_proj`: a new model predicts zeros)."""
    layer = nn.Linear(in_features, out_features, device=device, dtype=dtype)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def check_heads(width: int, heads: int) -> None:
    if heads < 1 or width % heads:
        raise ValueError(f"width={width} must be divisible by heads={heads}")


class QKVMultiheadAttention(nn.Module):
    """Attention over a fused `[batch, n_ctx, heads * 3 * d]` q/k/v tensor (no parameters)."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 heads: int, n_ctx: int):
        super().__init__()
        self.device, self.dtype, self.heads, self.n_ctx = device, dtype, heads, n_ctx

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        """`[batch, n_ctx, 3 * width]` -> `[batch, n_ctx, width]`."""
        return attention(*split_heads(qkv, self.heads, 3))


class MultiheadAttention(nn.Module):
    """Self-attention: `c_qkv` (width -> 3 width), attention, `c_proj`; linears initialised with std `init_scale`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, width: int, heads: int, init_scale: float):
        super().__init__()
        check_heads(width, heads)
        self.n_ctx, self.width, self.heads = n_ctx, width, heads
        self.c_qkv = nn.Linear(width, width * 3, device=device, dtype=dtype)
        self.c_proj = nn.Linear(width, width, device=device, dtype=dtype)
        self.attention = QKVMultiheadAttention(device=device, dtype=dtype, heads=heads, n_ctx=n_ctx)
        init_linear(self.c_qkv, init_scale)
        init_linear(self.c_proj, init_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch, n_ctx, width]` -> `[batch, n_ctx, width]`."""
        return self.c_proj(self.attention(self.c_qkv(x)))


class MLP(nn.Module):
    """`c_fc` (width -> 4 width), exact GELU, `c_proj` (4 width -> width); std `init_scale`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 width: int, init_scale: float):
        super().__init__()
        self.width = width
        self.c_fc = nn.Linear(width, width * 4, device=device, dtype=dtype)
        self.c_proj = nn.Linear(width * 4, width, device=device, dtype=dtype)
        self.gelu = nn.GELU()
        init_linear(self.c_fc, init_scale)
        init_linear(self.c_proj, init_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class ResidualAttentionBlock(nn.Module):
    """`x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, width: int, heads: int, init_scale: float = 1.0):
        super().__init__()
        self.attn = MultiheadAttention(device=device, dtype=dtype, n_ctx=n_ctx, width=width, heads=heads,
                                       init_scale=init_scale)
        self.ln_1 = nn.LayerNorm(width, device=device, dtype=dtype)
        self.mlp = MLP(device=device, dtype=dtype, width=width, init_scale=init_scale)
        self.ln_2 = nn.LayerNorm(width, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """`layers` residual self-attention blocks (`resblocks.i`), no final LayerNorm; linears get std
    `init_scale / sqrt(width)`. `n_ctx` is informational (any sequence length runs)."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int, width: int, layers: int, heads: int, init_scale: float = 0.25):
        super().__init__()
        self.n_ctx, self.width, self.layers = n_ctx, width, layers
        std = init_scale / math.sqrt(width)
        self.resblocks = nn.ModuleList(
            ResidualAttentionBlock(device=device, dtype=dtype, n_ctx=n_ctx, width=width, heads=heads, init_scale=std)
            for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch, n, width]` -> `[batch, n, width]`."""
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
    """The shared trunk (docs/behaviour.md#sequence-assembly); on its own it is conditioned on the timestep only.

    `forward(x [batch, input_channels, n_ctx], t [batch]) -> [batch, output_channels, n_ctx]`.
    `cond_drop_prob` is the classifier-free-guidance dropout of the conditioned subclasses.
    """

    conditioning: Optional[str] = None

    def __init__(
        self,
        *,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        input_channels: int = 3,
        output_channels: int = 3,
        n_ctx: int = 1024,
        width: int = 512,
        layers: int = 12,
        heads: int = 8,
        init_scale: float = 0.25,
        time_token_cond: bool = False,
        use_pos_emb: bool = False,
        pos_emb_init_scale: float = 1.0,
        pos_emb_n_ctx: Optional[int] = None,
        cond_drop_prob: float = 0.0,
    ):
        super().__init__()
        if pos_emb_n_ctx not in (None, n_ctx):
            raise ValueError(f"pos_emb_n_ctx={pos_emb_n_ctx} must equal n_ctx={n_ctx} (one embedding per data token)")
        self.input_channels, self.output_channels = input_channels, output_channels
        self.n_ctx, self.width = n_ctx, width
        self.time_token_cond, self.use_pos_emb = time_token_cond, use_pos_emb
        self.cond_drop_prob = cond_drop_prob
        self.pos_emb = nn.Parameter(torch.empty(n_ctx, width, device=device, dtype=dtype)) if use_pos_emb else None
        if use_pos_emb:
            nn.init.normal_(self.pos_emb, std=pos_emb_init_scale)
        self.time_embed = MLP(device=device, dtype=dtype, width=width, init_scale=init_scale / math.sqrt(width))
        self.ln_pre = nn.LayerNorm(width, device=device, dtype=dtype)
        self.backbone = Transformer(device=device, dtype=dtype, n_ctx=n_ctx + int(time_token_cond), width=width,
                                    layers=layers, heads=heads, init_scale=init_scale)
        self.ln_post = nn.LayerNorm(width, device=device, dtype=dtype)
        self.input_proj = nn.Linear(input_channels, width, device=device, dtype=dtype)
        self.output_proj = zero_linear(width, output_channels, device, dtype)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """`[batch, input_channels, n_ctx]`, `[batch]` -> `[batch, output_channels, n_ctx]`."""
        return self.forward_with_cond(x, [(self.embed_time(t), self.time_token_cond)])

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

        :param x: `[batch, input_channels, n_ctx]` tokens (channel-major).
        :param conds: `(embedding, as_token)` pairs; `[batch, width]` or `[batch, k, width]`.
            Non-token conditionings are added to every data token, token ones are prepended.
        :return: `[batch, output_channels, n_ctx]`.
        """
        if x.dim() != 3 or x.shape[1] != self.input_channels or x.shape[2] != self.n_ctx:
            raise ValueError(f"x must be [batch, {self.input_channels}, {self.n_ctx}] (input_channels, n_ctx), "
                             f"got {list(x.shape)}")
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


def _clip_for(device: Optional[torch.device], frozen_clip: bool):
    """The trunk's CLIP: a lazy frozen ViT-L/14 (loaded on first use), or a trainable one (loaded now)."""
    return FrozenImageCLIP(device) if frozen_clip else ImageCLIP(device)


class _CLIPConditioned:
    """Mixin of the CLIP-conditioned trunks: texts/images/embeddings -> one conditioning tensor."""

    def conditioning_tensor(self, batch_size: int, images=None, texts=None, embeddings=None) -> torch.Tensor:
        """`[batch, *feature_shape]`: `embeddings` as given when it is one tensor, else every element
        embedded with `self.clip` (zeros where an element has nothing: the unconditional input)."""
        if isinstance(embeddings, torch.Tensor) and images is None and texts is None:
            expected = (batch_size, *self.feature_shape)
            if embeddings.shape != expected:
                raise ValueError(f"embeddings must be [{', '.join(map(str, expected))}] (batch, features), "
                                 f"got {list(embeddings.shape)}")
            return embeddings
        return conditioning_embeddings(
            self.conditioning, batch_size, texts=texts, images=images, embeddings=embeddings, clip=self.clip,
            device=self.input_proj.weight.device, feature_shape=self.feature_shape,
        )

    def cached_model_kwargs(self, batch_size: int, model_kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Embed `texts=`/`images=`/`embeddings=` once before sampling: `{"embeddings": tensor, ...}`."""
        rest = {k: v for k, v in model_kwargs.items() if k not in ("texts", "images", "embeddings")}
        with torch.no_grad():
            emb = self.conditioning_tensor(batch_size, model_kwargs.get("images"), model_kwargs.get("texts"),
                                           model_kwargs.get("embeddings"))
        return dict(rest, embeddings=emb)


class CLIPImagePointDiffusionTransformer(_CLIPConditioned, PointDiffusionTransformer):
    """text300M's trunk: one CLIP text/image embedding `[batch, cond_width]`
    (docs/behaviour.md#text-conditioning).

    `cond_width` is CLIP ViT-L/14's 768 unless set (384 for a MiniLM-conditioned prior).
    """

    conditioning = "text"

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int = 1024, token_cond: bool = False, cond_drop_prob: float = 0.0, frozen_clip: bool = True,
                 cond_width: Optional[int] = None, **kwargs):
        super().__init__(device=device, dtype=dtype, n_ctx=n_ctx, cond_drop_prob=cond_drop_prob, **kwargs)
        self.token_cond = token_cond
        self.clip = _clip_for(device, frozen_clip)
        self.cond_width = CLIP_TEXT_WIDTH if cond_width is None else cond_width
        self.clip_embed = nn.Linear(self.cond_width, self.width, device=device, dtype=dtype)

    @property
    def feature_shape(self) -> Tuple[int]:
        return (self.cond_width,)

    def forward(self, x: torch.Tensor, t: torch.Tensor, images=None, texts=None, embeddings=None) -> torch.Tensor:
        """`[batch, channels, n_ctx]`, `[batch]` -> `[batch, output_channels, n_ctx]`.

        Conditioning per element: a text, an image or a precomputed `[cond_width]` embedding (one
        tensor `[batch, cond_width]` for all), zeros where none. Unit-norm embeddings are scaled by
        `sqrt(cond_width)` so that their features have unit variance.
        """
        emb = self.conditioning_tensor(len(x), images, texts, embeddings)
        clip_out = self.drop_conditioning(emb.to(device=x.device, dtype=torch.float32))
        clip_embed = self.clip_embed(math.sqrt(self.cond_width) * clip_out.to(self.clip_embed.weight.dtype))
        conds = [(clip_embed, self.token_cond), (self.embed_time(t), self.time_token_cond)]
        return self.forward_with_cond(x, conds)


def _grid_embed(channels: int, width: int, device, dtype) -> nn.Sequential:
    """LayerNorm over the grid channels, then Linear(channels -> width) (`clip_embed.0`, `clip_embed.1`)."""
    return nn.Sequential(nn.LayerNorm(channels, device=device, dtype=dtype),
                         nn.Linear(channels, width, device=device, dtype=dtype))


class _GridConditioned(_CLIPConditioned):
    """Mixin: a `[batch, channels, tokens]` grid as `tokens` conditioning tokens
    (docs/behaviour.md#image-grid-conditioning)."""

    conditioning = "image_grid"

    @property
    def feature_shape(self) -> Tuple[int, int]:
        return self.grid_shape

    def grid_tokens(self, batch_size: int, images, embeddings) -> torch.Tensor:
        """`[batch, tokens, width]` conditioning tokens (training: rows dropped with `cond_drop_prob`)."""
        grid = self.conditioning_tensor(batch_size, images, None, embeddings)
        grid = self.drop_conditioning(grid.to(device=self.input_proj.weight.device, dtype=torch.float32))
        return self.clip_embed(grid.permute(0, 2, 1).to(self.input_proj.weight.dtype))


class CLIPImageGridPointDiffusionTransformer(_GridConditioned, PointDiffusionTransformer):
    """image300M's trunk: a CLIP ViT-L/14 patch grid `[batch, 1024, 256]` as 256 tokens
    (docs/behaviour.md#image-grid-conditioning).

    Any grid of feature tokens fits (`grid_channels` x `grid_tokens`): the small image encoder's
    patches, or a caption's MiniLM token states (`conditioner: minilm_tokens`).
    """

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int = 1024, cond_drop_prob: float = 0.0, frozen_clip: bool = True,
                 grid_channels: int = CLIP_GRID_CHANNELS, grid_tokens: int = CLIP_GRID_TOKENS, **kwargs):
        super().__init__(device=device, dtype=dtype, n_ctx=n_ctx, cond_drop_prob=cond_drop_prob, **kwargs)
        self.clip = _clip_for(device, frozen_clip)
        self.grid_shape = (grid_channels, grid_tokens)
        self.clip_embed = _grid_embed(grid_channels, self.width, device, dtype)

    def forward(self, x: torch.Tensor, t: torch.Tensor, images=None, embeddings=None) -> torch.Tensor:
        """`[batch, channels, n_ctx]`, `[batch]`, images or `[batch, grid_channels, grid_tokens]` grids
        (zeros when neither is given) -> `[batch, output_channels, n_ctx]`."""
        grid = self.grid_tokens(len(x), images, embeddings)
        return self.forward_with_cond(x, [(self.embed_time(t), self.time_token_cond), (grid, True)])


class UpsamplePointDiffusionTransformer(PointDiffusionTransformer):
    """A trunk conditioned on a low-resolution point set `low_res [batch, cond_input_channels, cond_ctx]`,
    whose points become `cond_ctx` extra tokens (after the optional per-channel affine map)."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 cond_input_channels: Optional[int] = None, cond_ctx: int = 1024, n_ctx: int = 3072,
                 channel_scales: Optional[Sequence[float]] = None, channel_biases: Optional[Sequence[float]] = None,
                 **kwargs):
        super().__init__(device=device, dtype=dtype, n_ctx=n_ctx, **kwargs)
        self.cond_ctx = cond_ctx
        self.cond_input_channels = cond_input_channels or self.input_channels
        self.cond_point_proj = nn.Linear(self.cond_input_channels, self.width, device=device, dtype=dtype)
        for name, values in (("channel_scales", channel_scales), ("channel_biases", channel_biases)):
            tensor = None if values is None else torch.tensor(values, device=device, dtype=dtype)
            if tensor is not None and tensor.shape != (self.cond_input_channels,):
                raise ValueError(f"{name} needs {self.cond_input_channels} values (cond_input_channels), got {values}")
            self.register_buffer(name, tensor)

    def embed_low_res(self, low_res: torch.Tensor) -> torch.Tensor:
        """`[batch, cond_input_channels, cond_ctx]` -> `[batch, cond_ctx, width]` tokens."""
        if low_res.dim() != 3 or low_res.shape[1] != self.cond_input_channels:
            raise ValueError(f"low_res must be [batch, {self.cond_input_channels}, points], got {list(low_res.shape)}")
        if self.channel_scales is not None:
            low_res = low_res * self.channel_scales[None, :, None]
        if self.channel_biases is not None:
            low_res = low_res + self.channel_biases[None, :, None]
        return self.cond_point_proj(low_res.permute(0, 2, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, *, low_res: torch.Tensor) -> torch.Tensor:
        """`[batch, channels, n_ctx]`, `[batch]`, low_res -> `[batch, output_channels, n_ctx]`."""
        conds = [(self.embed_time(t), self.time_token_cond), (self.embed_low_res(low_res), True)]
        return self.forward_with_cond(x, conds)


class CLIPImageGridUpsamplePointDiffusionTransformer(_GridConditioned, UpsamplePointDiffusionTransformer):
    """The upsampler conditioned on a CLIP patch grid as well: tokens `[time?, grid, low_res, x]`."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 n_ctx: int = 3072, cond_drop_prob: float = 0.0, frozen_clip: bool = True,
                 grid_channels: int = CLIP_GRID_CHANNELS, grid_tokens: int = CLIP_GRID_TOKENS, **kwargs):
        super().__init__(device=device, dtype=dtype, n_ctx=n_ctx, cond_drop_prob=cond_drop_prob, **kwargs)
        self.clip = _clip_for(device, frozen_clip)
        self.grid_shape = (grid_channels, grid_tokens)
        self.clip_embed = _grid_embed(grid_channels, self.width, device, dtype)

    def forward(self, x: torch.Tensor, t: torch.Tensor, *, low_res: torch.Tensor, images=None,
                embeddings=None) -> torch.Tensor:
        """As `UpsamplePointDiffusionTransformer.forward`, plus the grid of `images` or `embeddings`."""
        grid = self.grid_tokens(len(x), images, embeddings)
        conds = [(self.embed_time(t), self.time_token_cond), (grid, True), (self.embed_low_res(low_res), True)]
        return self.forward_with_cond(x, conds)


# The names these classes had before they took the official ones.
SelfAttention = MultiheadAttention
TextConditionedTransformer = CLIPImagePointDiffusionTransformer
ImageGridConditionedTransformer = CLIPImageGridPointDiffusionTransformer
