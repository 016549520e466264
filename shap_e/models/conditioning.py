"""The conditioning interface shared by every text and image encoder of the prior.

A diffusion prior only needs fixed-width features. CLIP (``shap_e.models.clip.FrozenCLIP``), the
MiniLM sentence encoder (``shap_e.models.sentence_encoder``) and the small from-scratch image encoder
(``shap_e.models.image_encoder``) all expose the same two methods, so the prior and the training code
are written against these Protocols and never against a concrete encoder.
"""
from typing import Any, Protocol, Sequence, Tuple, runtime_checkable

import torch

__all__ = ["ImageGridConditioner", "TextConditioner"]


@runtime_checkable
class TextConditioner(Protocol):
    """Maps captions to one vector each.

    ``embedding_dim`` is the width D the prior's config must use (768 for CLIP ViT-L/14, 384 for
    MiniLM-L6).
    """

    @property
    def embedding_dim(self) -> int:
        """Width D of the vectors returned by :meth:`embed_text`."""
        ...

    def embed_text(self, texts: Sequence[str]) -> torch.Tensor:
        """``[len(texts), embedding_dim]`` float32 embeddings, L2-normalised per row."""
        ...


@runtime_checkable
class ImageGridConditioner(Protocol):
    """Maps images to a channel-major grid of tokens, like CLIP's patch features for image300M.

    ``grid_shape`` is ``(channels, n_tokens)``: (1024, 256) for CLIP ViT-L/14.
    """

    @property
    def grid_shape(self) -> Tuple[int, int]:
        """``(channels, n_tokens)`` of the grids returned by :meth:`embed_images_grid`."""
        ...

    def embed_images_grid(self, images: Sequence[Any]) -> torch.Tensor:
        """``[len(images), channels, n_tokens]`` float32 grid features."""
        ...
