"""The conditioning interface shared by every text and image encoder of the prior.

A diffusion prior only needs fixed-width features. CLIP (``shap_e.models.clip.FrozenCLIP``), the
MiniLM sentence encoder (``shap_e.models.sentence_encoder``) and the small from-scratch image encoder
(``shap_e.models.image_encoder``) implement the Protocols below, so the prior and the training code
are written against these Protocols and never against a concrete encoder.

`conditioning_embeddings` turns a batch's `texts=`/`images=`/`embeddings=` into the prior's
conditioning tensor, with zeros (the unconditional input) for elements that have none.
"""
from typing import Any, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import torch

from shap_e.util.prompt_warnings import PromptTruncatedWarning, warn_truncated_prompt

__all__ = [
    "FEATURE_SHAPES", "ImageGridConditioner", "PromptTruncatedWarning", "TextConditioner", "TextGridConditioner",
    "conditioning_embeddings", "warn_truncated_prompt",
]


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
class TextGridConditioner(Protocol):
    """Maps captions to their token states, a channel-major grid like an image's patch features.

    A prior conditioned on every token, not one pooled vector, can tell which colour a caption gives
    to which part ("a lamp with a red base and a blue shade").
    """

    @property
    def embedding_dim(self) -> int:
        """Channels of the grids returned by :meth:`embed_text_grid` (384 for MiniLM-L6)."""
        ...

    def embed_text_grid(self, texts: Sequence[str], n_tokens: int) -> torch.Tensor:
        """``[len(texts), embedding_dim, n_tokens]`` float32; columns past a text's last token are zero."""
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


# Feature shapes of ViT-L/14, used for all-zero (unconditional) batches with nothing to embed. A text
# grid has no release shape: its (channels, n_tokens) come from the prior (`feature_shape`).
FEATURE_SHAPES = {"text": (768,), "image": (768,), "image_grid": (1024, 256), "text_grid": None}


def _per_row(values: Any, batch_size: int, name: str) -> List[Any]:
    """A list of `batch_size` entries (None where absent) from None, a list or a batched tensor."""
    if values is None:
        return [None] * batch_size
    if isinstance(values, str):
        raise ValueError(f"{name} must be a list with one entry per batch element, not a single string")
    rows = list(values.unbind(0)) if isinstance(values, torch.Tensor) else list(values)
    if len(rows) != batch_size:
        raise ValueError(f"{name} has {len(rows)} entries but batch_size={batch_size}; give one per element")
    return rows


def _check_one_modality(texts: List[Any], images: List[Any], embeddings: List[Any]) -> None:
    for i, entries in enumerate(zip(texts, images, embeddings)):
        if sum(e is not None for e in entries) > 1:
            raise ValueError(f"batch element {i} has more than one of texts/images/embeddings; give one")


def conditioning_embeddings(
    kind: str,
    batch_size: int,
    texts: Optional[Sequence[Optional[str]]] = None,
    images: Optional[Sequence[Any]] = None,
    embeddings: Optional[Union[torch.Tensor, Sequence[Optional[torch.Tensor]]]] = None,
    clip: Optional[Any] = None,
    device: Union[str, torch.device, None] = None,
    feature_shape: Optional[Tuple[int, ...]] = None,
) -> torch.Tensor:
    """Per-element CLIP conditioning for the diffusion models, zeros where an element has none.

    :param kind: `"text"` or `"image"`: `[batch, 768]` unit vectors (an element may be a text, an
        image or a precomputed embedding); `"image_grid"`: `[batch, 1024, 256]` grids;
        `"text_grid"`: `[batch, channels, n_tokens]` caption token states (`TextGridConditioner`;
        texts or embeddings, and `feature_shape=(channels, n_tokens)` is required).
    :param embeddings: precomputed rows, used as given (cast to float32); they bypass CLIP entirely.
    :param clip: the encoder to embed with (CLIP, or any `TextConditioner`/`ImageGridConditioner`);
        default: a shared lazy ViT-L/14, loaded only if needed.
    :param feature_shape: the shape every row must have, and of the zero rows (default: the first
        given row's, or ViT-L/14's when nothing is given).
    For `"image_grid"` with `images` given, `None` entries are embedded as a 64x64 black image
    (as the reference does); a batch without images or embeddings is all zeros (unconditional).
    """
    _check_arguments(kind, texts, images, feature_shape)
    text_rows, emb_rows = _per_row(texts, batch_size, "texts"), _per_row(embeddings, batch_size, "embeddings")
    image_rows = _per_row(images, batch_size, "images")
    _check_one_modality(text_rows, image_rows, emb_rows)
    rows: List[Optional[torch.Tensor]] = [None if e is None else e.float() for e in emb_rows]
    text_idx = [i for i, t in enumerate(text_rows) if t is not None]
    if kind == "image_grid" and images is not None:
        image_idx = [i for i in range(batch_size) if emb_rows[i] is None]
    else:
        image_idx = [i for i, im in enumerate(image_rows) if im is not None]
    if text_idx or image_idx:
        if clip is None:
            from shap_e.models.clip import default_clip

            clip = default_clip(device)
        if text_idx:
            captions = [text_rows[i] for i in text_idx]
            if kind == "text_grid":
                embedded = clip.embed_text_grid(captions, feature_shape[1])
            else:
                embedded = clip.embed_text(captions)
            for i, e in zip(text_idx, embedded):
                rows[i] = e
        if image_idx:
            embed = clip.embed_images_grid if kind == "image_grid" else clip.embed_images
            for i, e in zip(image_idx, embed([image_rows[i] for i in image_idx])):
                rows[i] = e
    return _stack_rows(rows, kind, feature_shape, device)


def _check_arguments(kind: str, texts, images, feature_shape) -> None:
    if kind not in FEATURE_SHAPES:
        raise ValueError(f"kind={kind!r} is not valid; use one of {sorted(FEATURE_SHAPES)}")
    if kind == "image_grid" and texts is not None:
        raise ValueError("kind='image_grid' takes images or embeddings, not texts")
    if kind == "text_grid":
        if images is not None:
            raise ValueError("kind='text_grid' takes texts or embeddings, not images")
        if feature_shape is None:
            raise ValueError("kind='text_grid' needs feature_shape=(channels, n_tokens), the prior's grid shape")


def _stack_rows(rows: List[Optional[torch.Tensor]], kind: str, feature_shape: Optional[Tuple[int, ...]],
                device: Union[str, torch.device, None]) -> torch.Tensor:
    """`[batch, *shape]`: the rows, zeros where a row is None; every given row must have `shape`."""
    present = [r for r in rows if r is not None]
    if feature_shape is not None:
        shape = tuple(feature_shape)
    else:
        shape = tuple(present[0].shape) if present else FEATURE_SHAPES[kind]
    if device is not None:
        target = torch.device(device)
    else:
        target = present[0].device if present else torch.device("cpu")
    out = torch.zeros(len(rows), *shape, device=target)
    for i, row in enumerate(rows):
        if row is not None:
            if tuple(row.shape) != shape:
                raise ValueError(f"embedding {i} has shape {list(row.shape)}, expected {list(shape)}")
            out[i] = row.to(target)
    return out
