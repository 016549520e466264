"""Official `shap_e.models.generation.pretrained_clip`: adapters over `shap_e.models.clip.FrozenCLIP`.

`FrozenImageCLIP` (what the conditioned trunks use) is lazy: nothing loads until it embeds, and the
default ViT-L/14 is the package's shared CLIP (`default_clip`, which honours `$SHAP_E_CLIP`).
`ImageCLIP` is the trainable `nn.Module` form: it loads both towers when built and lets gradients
through. Both take the official `clip_name` ("ViT-L/14", "ViT-B/32"), or a Hugging Face id or a
local `save_pretrained` folder of any CLIP checkpoint.
"""
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

from shap_e.models.clip import FrozenCLIP, default_clip
from shap_e.models.conditioning import conditioning_embeddings

__all__ = ["CLIP_NAMES", "FrozenImageCLIP", "ImageCLIP", "ImageType"]

ImageType = Union[np.ndarray, torch.Tensor, Image.Image]

# Official CLIP names: (Hugging Face id, feature_dim, grid_size, grid_feature_dim).
CLIP_NAMES = {
    "ViT-L/14": ("openai/clip-vit-large-patch14", 768, 16, 1024),
    "ViT-B/32": ("openai/clip-vit-base-patch32", 512, 7, 768),
}


def _clip_source(clip_name: str) -> Optional[str]:
    """What `FrozenCLIP` loads for `clip_name`; None for ViT-L/14, the default that `$SHAP_E_CLIP` redirects."""
    if not isinstance(clip_name, str) or not clip_name:
        raise ValueError(f"clip_name must be one of {sorted(CLIP_NAMES)}, a Hugging Face id or a CLIP folder, "
                         f"got {clip_name!r}")
    if clip_name == "ViT-L/14":
        return None
    return CLIP_NAMES[clip_name][0] if clip_name in CLIP_NAMES else clip_name


class _Sizes:
    """`feature_dim`, `grid_size`, `grid_feature_dim` of `self.clip_name`, and the conditioning
    Protocols' `embedding_dim`/`grid_shape`: from the official table, or read from a local model's
    config (no weights are loaded). Each adapter has `clip_name` and `_frozen()`, its `FrozenCLIP`."""

    def _sizes(self) -> Tuple[int, int, int]:
        clip = self._frozen()
        if self.clip_name in CLIP_NAMES and not Path(clip.name_or_dir).expanduser().is_dir():
            return CLIP_NAMES[self.clip_name][1:]
        channels, tokens = clip.grid_shape
        return clip.embedding_dim, math.isqrt(tokens), channels

    @property
    def feature_dim(self) -> int:
        """Width of `embed_text`/`embed_images` (768 for ViT-L/14)."""
        return self._sizes()[0]

    @property
    def grid_size(self) -> int:
        """Patches per side of `embed_images_grid` (16 for ViT-L/14)."""
        return self._sizes()[1]

    @property
    def grid_feature_dim(self) -> int:
        """Channels of `embed_images_grid` (1024 for ViT-L/14)."""
        return self._sizes()[2]

    @property
    def embedding_dim(self) -> int:
        return self.feature_dim

    @property
    def grid_shape(self) -> Tuple[int, int]:
        return self.grid_feature_dim, self.grid_size ** 2

    def _embed(self, batch_size: int, images, texts, embeddings) -> torch.Tensor:
        """`[batch, feature_dim]`: per element an image, a text or a given embedding, else zeros."""
        return conditioning_embeddings("text", batch_size, texts=texts, images=images, embeddings=embeddings,
                                       clip=self, device=self._frozen().device, feature_shape=(self.feature_dim,))


class ImageCLIP(_Sizes, nn.Module):
    """A trainable CLIP that embeds batches mixing texts, images, embeddings and empty elements.

    Loads both towers when built (raises `ClipUnavailableError` naming the download command when the
    weights are not on disk). `ensure_used_params` ties every parameter into each output with weight
    zero, so that distributed training sees all of them used.
    """

    def __init__(self, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = torch.float32,
                 ensure_used_params: bool = True, clip_name: str = "ViT-L/14", cache_dir: Optional[str] = None):
        super().__init__()
        self.device, self.ensure_used_params, self.clip_name = device, ensure_used_params, clip_name
        self._clip = FrozenCLIP(_clip_source(clip_name), cache_dir=cache_dir, device=device,
                                dtype=dtype or torch.float32)
        self.text_model = self._clip.text_model.requires_grad_(True)
        self.vision_model = self._clip.vision_model.requires_grad_(True)

    def _frozen(self) -> FrozenCLIP:
        return self._clip

    def _used(self, out: torch.Tensor) -> torch.Tensor:
        if not self.ensure_used_params:
            return out
        return out + sum(p.view(-1)[0] for p in self.parameters()) * 0.0

    def forward(self, batch_size: int, images: Optional[Iterable[Optional[ImageType]]] = None,
                texts: Optional[Iterable[Optional[str]]] = None,
                embeddings: Optional[Iterable[Optional[torch.Tensor]]] = None) -> torch.Tensor:
        """`[batch_size, feature_dim]`; at most one of images/texts/embeddings per element, zeros for none."""
        return self._used(self._embed(batch_size, images, texts, embeddings))

    def embed_images(self, xs: Iterable[Optional[ImageType]]) -> torch.Tensor:
        """`[N, feature_dim]` L2-normalised image embeddings (None is a black image)."""
        return self._clip.image_features(list(xs))

    def embed_text(self, prompts: Iterable[str]) -> torch.Tensor:
        """`[N, feature_dim]` L2-normalised text embeddings."""
        return self._clip.text_features(list(prompts))

    def embed_images_grid(self, xs: Iterable[Optional[ImageType]]) -> torch.Tensor:
        """`[N, grid_feature_dim, grid_size ** 2]` patch features (docs/behaviour.md#clip)."""
        return self._used(self._clip.image_grid_features(list(xs)))

    def images_to_tensor(self, xs: Iterable[Optional[ImageType]]) -> torch.Tensor:
        """CLIP's preprocessing: `[N, 3, size, size]` normalised pixels."""
        return self._clip.pixels(list(xs))


class FrozenImageCLIP(_Sizes):
    """CLIP without gradients, loaded on first use; not an `nn.Module`, so it adds no state-dict keys.

    `kwargs`: `clip_name`, `cache_dir` (as `ImageCLIP`).
    """

    def __init__(self, device: Optional[torch.device] = None, **kwargs: Any):
        unknown = sorted(set(kwargs) - {"clip_name", "cache_dir"})
        if unknown:
            raise ValueError(f"unknown FrozenImageCLIP argument(s) {unknown}; valid: ['cache_dir', 'clip_name']")
        self.device = device
        self.clip_name = kwargs.get("clip_name", "ViT-L/14")
        self.cache_dir = kwargs.get("cache_dir")
        self._source = _clip_source(self.clip_name)
        self._clip: Optional[FrozenCLIP] = None

    def _frozen(self) -> FrozenCLIP:
        if self._clip is None:
            if self._source is None and self.cache_dir is None:
                self._clip = default_clip(self.device)
            else:
                self._clip = FrozenCLIP(self._source, cache_dir=self.cache_dir, device=self.device)
        return self._clip

    def __call__(self, batch_size: int, images: Optional[Iterable[Optional[ImageType]]] = None,
                 texts: Optional[Iterable[Optional[str]]] = None,
                 embeddings: Optional[Iterable[Optional[torch.Tensor]]] = None) -> torch.Tensor:
        """`[batch_size, feature_dim]` as `ImageCLIP.forward`; gradients still reach given embeddings."""
        return self._embed(batch_size, images, texts, embeddings)

    def embed_images(self, xs: Iterable[Optional[ImageType]]) -> torch.Tensor:
        return self._frozen().embed_images(list(xs))

    def embed_text(self, prompts: Iterable[str]) -> torch.Tensor:
        return self._frozen().embed_text(list(prompts))

    def embed_images_grid(self, xs: Iterable[Optional[ImageType]]) -> torch.Tensor:
        return self._frozen().embed_images_grid(list(xs))
