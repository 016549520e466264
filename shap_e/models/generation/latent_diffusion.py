"""`SplitVectorDiffusion`: a latent diffusion transformer that reads and writes flat latent vectors,
with its text or image conditioning (docs/behaviour.md#diffusion-transformers).

Real home of the official `shap_e.models.generation.latent_diffusion.SplitVectorDiffusion`; the
keyword arguments after the official four configure the small models' own text and image encoders.
"""
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn as nn

from shap_e.models.conditioning import conditioning_embeddings
from shap_e.models.generation.transformer import CONDITIONERS

class SplitVectorDiffusion(nn.Module):
    """Wraps a trunk so that it reads and writes flat latent vectors (docs/behaviour.md#latent-vectors).

    `forward(x [batch, d_latent], t [batch], embeddings=...) -> [batch, 2 * d_latent]` =
    `[x0 prediction | variance values]`, each token-major; `n_ctx` latent tokens of
    `d_latent // n_ctx` channels.
    """

    def __init__(
        self,
        *,
        device: Optional[torch.device] = None,
        wrapped: nn.Module,
        n_ctx: int,
        d_latent: int,
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
        if n_ctx < 1 or d_latent % n_ctx:
            raise ValueError(f"d_latent={d_latent} must be a multiple of n_ctx={n_ctx} (the latent tokens)")
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
        self.device = device
        self.d_latent = d_latent
        self.n_ctx = n_ctx
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
    def conditioning(self) -> Optional[str]:
        """"text" (one embedding per sample), "text_grid" (a caption's token states) or "image_grid"
        (a patch grid: CLIP's or the owned encoder's)."""
        if self.conditioner == "minilm_tokens":
            return "text_grid"
        return getattr(self.wrapped, "conditioning", None)

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        embeddings: Optional[torch.Tensor] = None,
        images: Optional[Any] = None,
        keep: Optional[torch.Tensor] = None,
        texts: Optional[Sequence[Optional[str]]] = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """`[batch, d_latent]`, `[batch]` -> `[batch, 2 * d_latent]`.

        :param embeddings: the conditioning features (see the wrapped model); None: unconditional.
        :param images: with `conditioner="grid_encoder"`, `[batch, 3, S, S]` pixels in [-1, 1] embedded
            by the owned image encoder *with* gradients (training); otherwise images (and `texts`)
            are embedded by the configured encoder, as `cached_model_kwargs` does.
        :param keep: `[batch]` bool; False rows get the all-zero (unconditional) conditioning, the
            input that guidance uses at sampling time.
        :param kwargs: passed on to the wrapped model (e.g. `low_res` of an upsampler).
        """
        if x.dim() != 2 or x.shape[1] != self.d_latent:
            raise ValueError(f"x must be [batch, {self.d_latent}] (d_latent), got {list(x.shape)}")
        if images is not None or texts is not None:
            if embeddings is not None:
                raise ValueError("pass either embeddings= or images=/texts=, not both")
            embeddings = self._embed_inputs(len(x), images, texts)
        if keep is not None and embeddings is not None:
            embeddings = embeddings * keep.to(embeddings.device).view(-1, *([1] * (embeddings.dim() - 1)))
        if embeddings is not None:
            kwargs["embeddings"] = embeddings
        h = x.reshape(x.shape[0], self.n_ctx, -1).permute(0, 2, 1)
        h = self.wrapped(h, t, **kwargs)
        mean, var = h.chunk(2, dim=1)
        return torch.cat([mean.permute(0, 2, 1).flatten(1), var.permute(0, 2, 1).flatten(1)], dim=1)

    def _embed_inputs(self, batch_size: int, images: Optional[Any], texts: Optional[Sequence]) -> torch.Tensor:
        """The conditioning of `images`/`texts` for `forward`: the owned image encoder's grid with
        gradients, or the configured frozen encoder's features."""
        if self.conditioning is None:
            raise ValueError(f"the wrapped {type(self.wrapped).__name__} is not conditioned on texts or images")
        if self.conditioner != "grid_encoder":
            if isinstance(images, torch.Tensor) and images.is_floating_point():
                raise ValueError(
                    f"images= needs a prior that owns an image encoder (conditioner='grid_encoder') to read a float "
                    f"pixel tensor; this one uses {self.conditioner!r}: pass PIL images or uint8 HWC arrays to embed "
                    "them with its encoder, or precomputed embeddings="
                )
            return self.cached_model_kwargs(batch_size, {"images": images, "texts": texts})["embeddings"]
        if texts is not None:
            raise ValueError("this prior is conditioned on images (conditioner='grid_encoder'); it takes no texts=")
        if not isinstance(images, torch.Tensor):
            raise ValueError("images= for training the owned image encoder must be a [batch, 3, S, S] tensor in "
                             "[-1, 1]; embed other images with cached_model_kwargs")
        return self.image_encoder(images.to(self.wrapped.input_proj.weight.device))

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
        """The encoder given to `set_clip`, MiniLM, or the trunk's frozen CLIP (`wrapped.clip`)."""
        if self._clip is None and self.conditioner in ("minilm", "minilm_tokens"):
            self._clip = self._minilm()
        return self.wrapped.clip if self._clip is None else self._clip

    def _minilm(self):
        from shap_e.models.sentence_encoder import SentenceEncoder

        encoder = SentenceEncoder.from_package(device=self.wrapped.input_proj.weight.device, layers=self.text_layers)
        width = self.wrapped.feature_shape[0]
        if encoder.embedding_dim != width:
            raise ValueError(
                f"MiniLM's states of text_layers={self.text_layers} have {encoder.embedding_dim} channels "
                f"but this prior reads {width}; set the inner model's "
                f"{'cond_width' if self.conditioner == 'minilm' else 'grid_channels'} to {encoder.embedding_dim}"
            )
        return encoder

    def cached_model_kwargs(self, batch_size: int, model_kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Turn `texts=`/`images=`/`embeddings=` into `{"embeddings": tensor}` once, before sampling.

        The encoder (CLIP, MiniLM for `conditioner="minilm"`/`"minilm_tokens"`, the owned image encoder
        for `"grid_encoder"`, run without gradients) is loaded only when texts or images are given;
        missing entries become zeros (the unconditional input). Other entries pass through.
        """
        kind = self.conditioning
        if kind is None:  # an inner model without text or image conditioning
            inner = getattr(self.wrapped, "cached_model_kwargs", None)
            return inner(batch_size, model_kwargs) if inner is not None else dict(model_kwargs)
        rest = {k: v for k, v in model_kwargs.items() if k not in ("texts", "images", "embeddings")}
        wants_encoder = any(model_kwargs.get(k) is not None for k in ("texts", "images"))
        images = model_kwargs.get("images")
        if self.conditioner == "grid_encoder" and isinstance(images, torch.Tensor):
            if len(images) != batch_size:
                raise ValueError(f"images has {len(images)} rows but batch_size={batch_size}; give one per element")
            with torch.no_grad():  # a pixel batch [batch, 3, H, W] in [-1, 1] needs no per-row conversion
                return dict(rest, embeddings=self.image_encoder.embed_images_grid(images))
        with torch.no_grad():
            emb = conditioning_embeddings(
                kind,
                batch_size,
                texts=model_kwargs.get("texts"),
                images=images,
                embeddings=model_kwargs.get("embeddings"),
                clip=self._encoder() if wants_encoder else None,
                device=self.wrapped.input_proj.weight.device,
                feature_shape=self.wrapped.feature_shape,
            )
        return dict(rest, embeddings=emb)


def _check_conditioner(wrapped: nn.Module, conditioner: str, image_encoder: Optional[nn.Module]) -> None:
    """Raise a ValueError when the conditioner, the inner model and the image encoder do not fit."""
    if conditioner not in CONDITIONERS:
        raise ValueError(f"conditioner={conditioner!r} is unknown; valid: {sorted(CONDITIONERS)}")
    if conditioner == "minilm" and getattr(wrapped, "conditioning", None) != "text":
        raise ValueError("conditioner='minilm' embeds texts; it needs a text-conditioned inner model")
    if conditioner == "minilm_tokens" and getattr(wrapped, "conditioning", None) != "image_grid":
        raise ValueError(
            "conditioner='minilm_tokens' gives token grids; it needs a grid inner model "
            "(CLIPImageGridPointDiffusionTransformer with grid_channels: 384)"
        )
    if conditioner != "grid_encoder":
        if image_encoder is not None:
            raise ValueError(f"an image_encoder needs conditioner='grid_encoder', not {conditioner!r}")
        return
    if getattr(wrapped, "conditioning", None) != "image_grid" or image_encoder is None:
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
