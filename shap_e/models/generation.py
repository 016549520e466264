"""Latent diffusion transformers: text- and image-grid-conditioned (docs/behaviour.md#diffusion-transformers).

A latent of `d_latent = n_ctx * channels` numbers is read token-major (element `n * channels + c`
is channel `c` of token `n`), projected to `width`, prefixed with conditioning tokens and run
through a pre-LN transformer. The output has `2 * channels` per token: the x0 prediction and the
learned-range variance value.
"""
import math
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.posenc import timestep_embedding
from shap_e.models.transformer import MLP, Transformer, is_meta

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


class SplitVectorDiffusion(nn.Module):
    """Wraps a trunk so that it reads and writes flat latent vectors (docs/behaviour.md#latent-vectors).

    `forward(x [batch, d_latent], t [batch], embeddings=...) -> [batch, 2 * d_latent]` =
    `[x0 prediction | variance values]`, each token-major.
    """

    def __init__(
        self,
        *,
        wrapped: PointDiffusionTransformer,
        d_latent: int,
        latent_ctx: int,
        conditioner: str = "clip",
        image_encoder: Optional[nn.Module] = None,
        latent_head: Optional[nn.Module] = None,
        text_layers: Optional[List[int]] = None,
        colour_hint: Optional[nn.Module] = None,
        category_hint: Optional[nn.Module] = None,
    ):
        """text_layers: the MiniLM hidden states a `minilm`/`minilm_tokens` prior reads its captions
        from, concatenated (`SentenceEncoder`'s `layers`; None: the last layer).
        colour_hint, category_hint: `CaptionHint` read-outs whose tokens end every caption grid, the
        colour's then the category's (`shap_e.models.caption_hint`); only for `minilm_tokens`."""
        super().__init__()
        _check_conditioner(wrapped, conditioner, image_encoder)
        if text_layers is not None and conditioner not in ("minilm", "minilm_tokens"):
            raise ValueError(f"text_layers picks MiniLM's hidden states; it needs conditioner 'minilm' or "
                             f"'minilm_tokens', not {conditioner!r}")
        for name, hint in (("colour_hint", colour_hint), ("category_hint", category_hint)):
            if hint is not None and conditioner != "minilm_tokens":
                raise ValueError(f"{name} reads a caption's token grid; it needs conditioner 'minilm_tokens', "
                                 f"not {conditioner!r}")
        if latent_head is not None and image_encoder is None:
            raise ValueError("a latent_head reads the prior's own image grid; it needs conditioner='grid_encoder'")
        self.d_latent = d_latent
        self.n_ctx = latent_ctx
        self.wrapped = wrapped
        self.conditioner = conditioner
        # Registered only when present, so CLIP/MiniLM priors keep the release state-dict keys.
        self.image_encoder = image_encoder
        # The image encoder's regression of the latent (`LatentHead`), a start for sampling; optional.
        self.latent_head = latent_head
        self.text_layers = text_layers
        # Registered only when present, like the image encoder and the latent head.
        self.colour_hint = colour_hint
        self.category_hint = category_hint
        self._clip = None

    @property
    def conditioning(self) -> str:
        """"text" (one embedding per sample), "text_grid" (a caption's token states) or "image_grid"
        (a patch grid: CLIP's or the owned encoder's)."""
        if self.conditioner == "minilm_tokens":
            return "text_grid"
        return self.wrapped.conditioning

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        embeddings: Optional[torch.Tensor] = None,
        images: Optional[torch.Tensor] = None,
        keep: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """`[batch, d_latent]`, `[batch]` -> `[batch, 2 * d_latent]`.

        :param embeddings: the conditioning features (see the wrapped model); None: unconditional.
        :param images: `[batch, 3, S, S]` pixels in [-1, 1], embedded by the owned image encoder
            *with* gradients (training); only for `conditioner="grid_encoder"`.
        :param keep: `[batch]` bool; False rows get the all-zero (unconditional) conditioning, the
            input that guidance uses at sampling time.
        """
        if images is not None:
            if embeddings is not None:
                raise ValueError("pass either embeddings= or images=, not both")
            if self.image_encoder is None:
                raise ValueError(
                    f"images= needs a prior that owns an image encoder (conditioner='grid_encoder'), this one "
                    f"uses {self.conditioner!r}; pass precomputed embeddings= instead"
                )
            embeddings = self.image_encoder(images.to(self.wrapped.input_proj.weight.device))
        if keep is not None and embeddings is not None:
            embeddings = embeddings * keep.to(embeddings.device).view(-1, *([1] * (embeddings.dim() - 1)))
        batch = x.shape[0]
        h = x.reshape(batch, self.n_ctx, -1).permute(0, 2, 1)
        h = self.wrapped(h, t, embeddings=embeddings)
        mean, var = h.chunk(2, dim=1)
        return torch.cat([mean.permute(0, 2, 1).flatten(1), var.permute(0, 2, 1).flatten(1)], dim=1)

    def regress_latent(self, batch_size: int, model_kwargs: Dict[str, Any]) -> torch.Tensor:
        """`[batch_size, d_latent]`: the latent head's single guess of the pictured object's latent.

        `model_kwargs` holds `images=` (as for sampling). The guess is a mean over what the picture
        leaves open, so it is smooth; `sample_latents(..., init_latent=guess, strength=s)` adds the
        detail (the registry's `init_strength`).
        """
        if self.latent_head is None:
            raise ValueError("this prior has no latent head (config latent_head: true); sample from noise instead")
        if model_kwargs.get("images") is None:
            raise ValueError("regress_latent needs images= in model_kwargs: the head reads the picture")
        grid = self.cached_model_kwargs(batch_size, model_kwargs)["embeddings"]  # [batch, width, tokens]
        with torch.no_grad():
            return self.latent_head(grid).float()

    def set_clip(self, clip) -> None:
        """Embed `texts=`/`images=` with this encoder (a `FrozenCLIP`, or any conditioner of
        `shap_e.models.conditioning`) instead of the configured one."""
        if self.conditioner == "grid_encoder":
            raise ValueError("this prior embeds images with its own trained image_encoder; set_clip does not apply")
        self._clip = clip

    @property
    def hints(self) -> List[nn.Module]:
        """The prior's caption hints (`CaptionHint`), in the order their tokens end its grids."""
        return [hint for hint in (self.colour_hint, self.category_hint) if hint is not None]

    def _encoder(self):
        """The configured text/image encoder, created lazily (nothing is loaded until it embeds); with
        caption hints, wrapped so that its grids end with the hint tokens (`CaptionHintEncoder`)."""
        if self.conditioner == "grid_encoder":
            return self.image_encoder
        if self.hints:
            from shap_e.models.caption_hint import CaptionHintEncoder

            return CaptionHintEncoder(self._text_encoder(), self.hints)
        return self._text_encoder()

    def _text_encoder(self):
        """CLIP, MiniLM or the encoder given to `set_clip`."""
        if self._clip is None:
            if self.conditioner in ("minilm", "minilm_tokens"):
                from shap_e.models.sentence_encoder import SentenceEncoder

                encoder = SentenceEncoder.from_package(device=self.wrapped.input_proj.weight.device,
                                                       layers=self.text_layers)
                width = self.wrapped.cond_width if self.conditioner == "minilm" else self.wrapped.grid_shape[0]
                if encoder.embedding_dim != width:
                    raise ValueError(
                        f"MiniLM's states of text_layers={self.text_layers} have {encoder.embedding_dim} channels "
                        f"but this prior reads {width}; set the inner model's "
                        f"{'cond_width' if self.conditioner == 'minilm' else 'grid_channels'} to {encoder.embedding_dim}"
                    )
                self._clip = encoder
            else:
                from shap_e.models.clip import default_clip

                self._clip = default_clip(self.wrapped.input_proj.weight.device)
        return self._clip

    def cached_model_kwargs(self, batch_size: int, model_kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Turn `texts=`/`images=`/`embeddings=` into `{"embeddings": tensor}` once, before sampling.

        The encoder (CLIP, MiniLM for `conditioner="minilm"`/`"minilm_tokens"`, the owned image encoder
        for `"grid_encoder"`, run without gradients) is loaded only when texts or images are given;
        missing entries become zeros (the unconditional input).
        """
        from shap_e.models.conditioning import conditioning_embeddings

        wants_encoder = any(model_kwargs.get(k) is not None for k in ("texts", "images"))
        kind = self.conditioning
        shape = (self.wrapped.cond_width,) if kind == "text" else self.wrapped.grid_shape
        images = model_kwargs.get("images")
        if self.conditioner == "grid_encoder" and isinstance(images, torch.Tensor):
            if len(images) != batch_size:
                raise ValueError(f"images has {len(images)} rows but batch_size={batch_size}; give one per element")
            with torch.no_grad():  # a pixel batch [batch, 3, H, W] in [-1, 1] needs no per-row conversion
                return {"embeddings": self.image_encoder.embed_images_grid(images)}
        with torch.no_grad():
            emb = conditioning_embeddings(
                kind,
                batch_size,
                texts=model_kwargs.get("texts"),
                images=images,
                embeddings=model_kwargs.get("embeddings"),
                clip=self._encoder() if wants_encoder else None,
                device=self.wrapped.input_proj.weight.device,
                feature_shape=shape,
            )
        return {"embeddings": emb}


def _check_conditioner(
    wrapped: PointDiffusionTransformer, conditioner: str, image_encoder: Optional[nn.Module]
) -> None:
    """Raise a ValueError when the conditioner, the inner model and the image encoder do not fit."""
    if conditioner not in CONDITIONERS:
        raise ValueError(f"conditioner={conditioner!r} is unknown; valid: {sorted(CONDITIONERS)}")
    if conditioner == "minilm" and wrapped.conditioning != "text":
        raise ValueError("conditioner='minilm' embeds texts; it needs a text-conditioned inner model")
    if conditioner == "minilm_tokens" and wrapped.conditioning != "image_grid":
        raise ValueError(
            "conditioner='minilm_tokens' gives token grids; it needs a grid inner model "
            "(CLIPImageGridPointDiffusionTransformer with grid_channels: 384)"
        )
    if conditioner != "grid_encoder":
        if image_encoder is not None:
            raise ValueError(f"an image_encoder needs conditioner='grid_encoder', not {conditioner!r}")
        return
    if wrapped.conditioning != "image_grid" or image_encoder is None:
        raise ValueError(
            "conditioner='grid_encoder' needs an image-grid inner model (CLIPImageGridPointDiffusionTransformer) "
            "and an image_encoder config block"
        )
    if tuple(image_encoder.grid_shape) != tuple(wrapped.grid_shape):
        raise ValueError(
            f"the image encoder makes grids of (width, tokens) = {tuple(image_encoder.grid_shape)} but the prior "
            f"expects (grid_channels, grid_tokens) = {tuple(wrapped.grid_shape)}; set inner.grid_channels to the "
            f"encoder width and inner.grid_tokens to (image_size // patch_size) ** 2"
        )
