"""A small image encoder, trained from scratch on our renders, that produces grid tokens.

It stands in for CLIP ViT-L/14's patch features in image-grid conditioning (image300M,
docs/behaviour.md#image-grid-conditioning):
the output is channel-major like CLIP's, ``[batch, width, n_tokens]`` with
``n_tokens = (image_size // patch_size) ** 2``, and it is taken *before* any final LayerNorm because
the prior applies its own LayerNorm over the channels. Architecture: a stride-2 convolution stem
(``log2(patch_size)`` blocks; convolutions give the locality a from-scratch model on a small dataset
needs), a learned position embedding, then ``layers`` pre-norm transformer blocks.

A :class:`LatentHead` reads a whole latent off such a grid: the encoder's single best guess of the
pictured object, trained by squared error (``latent_probe`` in training) and used to start sampling.
"""
import math
from typing import Any, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ImageGridEncoder", "LatentHead", "images_to_pixels"]

ImagesLike = Union[torch.Tensor, Sequence[Any]]


def _one_image(image: Any, size: int) -> torch.Tensor:
    """PIL image, HWC uint8 array/tensor, or None (black) -> ``[3, H, W]`` float in [-1, 1]."""
    if image is None:
        return torch.full((3, size, size), -1.0)
    if hasattr(image, "convert"):  # PIL.Image
        image = np.asarray(image.convert("RGB"))
    array = torch.from_numpy(np.array(image))  # a copy: PIL-backed arrays are read-only
    if array.dtype != torch.uint8 or array.ndim != 3 or array.shape[-1] not in (3, 4):
        raise ValueError(
            f"images must be PIL images or HWC uint8 arrays with 3 or 4 channels (or one float tensor "
            f"[batch, 3, H, W] in [-1, 1]); got dtype {array.dtype}, shape {tuple(array.shape)}"
        )
    return array[..., :3].permute(2, 0, 1).float() / 127.5 - 1.0


def _centre_square(pixels: torch.Tensor) -> torch.Tensor:
    """Crop ``[..., H, W]`` to its central square."""
    height, width = pixels.shape[-2:]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    return pixels[..., top : top + side, left : left + side]


def images_to_pixels(images: ImagesLike, size: int) -> torch.Tensor:
    """Turn images into ``[batch, 3, size, size]`` float32 in [-1, 1].

    Accepts a float tensor ``[batch, 3, H, W]`` already in [-1, 1] (e.g. ``MultimodalBatch.views[:, i]``)
    or a sequence of PIL images / HWC uint8 arrays / None (a black image). Non-square images are
    centre-cropped; other sizes are resized with antialiased bilinear filtering.
    """
    if isinstance(images, torch.Tensor):
        if images.ndim != 4 or images.shape[1] != 3 or not images.is_floating_point():
            raise ValueError(f"an image tensor must be float [batch, 3, H, W] in [-1, 1], got {images.dtype} "
                             f"{tuple(images.shape)}; pass uint8 images as a list of HWC arrays")
        batch = [_centre_square(images.float())]
    else:
        batch = [_centre_square(_one_image(image, size)).unsqueeze(0) for image in images]
        if not batch:
            return torch.zeros(0, 3, size, size)
    resized = [
        b if b.shape[-1] == size
        else F.interpolate(b, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        for b in batch
    ]
    return torch.cat(resized)


def _stem(patch_size: int, width: int) -> nn.Sequential:
    """``log2(patch_size)`` stride-2 conv blocks, channels doubling up to ``width``, then a 1x1 conv."""
    n_down = int(math.log2(patch_size))
    channels = [3] + [max(width // 2 ** (n_down - 1 - i), 16) for i in range(n_down)]
    blocks = []
    for c_in, c_out in zip(channels[:-1], channels[1:]):
        conv = nn.Conv2d(c_in, c_out, 3, stride=2, padding=1)
        blocks += [conv, nn.GroupNorm(min(8, c_out), c_out), nn.SiLU()]
    return nn.Sequential(*blocks, nn.Conv2d(channels[-1], width, 1))


class ImageGridEncoder(nn.Module):
    """Untrained from-scratch image encoder; implements ``ImageGridConditioner``.

    ``forward(pixels [batch, 3, image_size, image_size] in [-1, 1]) -> [batch, width, n_tokens]``
    float32 grid tokens, row-major over the ``(image_size // patch_size)²`` patches.
    """

    def __init__(
        self,
        *,
        image_size: int = 64,
        patch_size: int = 8,
        width: int = 256,
        layers: int = 2,
        heads: int = 4,
        device: Union[str, torch.device, None] = None,
    ) -> None:
        super().__init__()
        if patch_size < 2 or patch_size & (patch_size - 1):
            raise ValueError(f"patch_size must be a power of two >= 2, got {patch_size}")
        if image_size % patch_size:
            raise ValueError(f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})")
        if width % heads:
            raise ValueError(f"width ({width}) must be divisible by heads ({heads})")
        self.image_size, self.patch_size, self.width = image_size, patch_size, width
        n_tokens = (image_size // patch_size) ** 2
        self.stem = _stem(patch_size, width)
        self.pos_emb = nn.Parameter(torch.randn(n_tokens, width) * 0.02)
        self.blocks = nn.Sequential(*[
            nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers)
        ])
        self.to(device)

    @property
    def grid_shape(self) -> Tuple[int, int]:
        """``(channels, n_tokens)`` of the output grid."""
        return self.width, (self.image_size // self.patch_size) ** 2

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[batch, 3, S, S]`` in [-1, 1] -> ``[batch, width, n_tokens]`` (S = image_size)."""
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (3, self.image_size, self.image_size):
            raise ValueError(f"pixels must be [batch, 3, {self.image_size}, {self.image_size}], got "
                             f"{tuple(pixels.shape)}; use embed_images_grid to resize images first")
        grid = self.stem(pixels)  # [B, width, side, side]
        tokens = grid.flatten(2).transpose(1, 2) + self.pos_emb  # [B, n_tokens, width]
        return self.blocks(tokens).transpose(1, 2).contiguous()  # [B, width, n_tokens]

    def embed_images_grid(self, images: ImagesLike) -> torch.Tensor:
        """Images (see :func:`images_to_pixels`) -> ``[batch, width, n_tokens]`` float32 grid tokens.

        Gradients flow (the encoder is trained with the prior); wrap in ``torch.no_grad()`` to sample.
        """
        device = self.pos_emb.device
        return self(images_to_pixels(images, self.image_size).to(device, self.pos_emb.dtype)).float()


class LatentHead(nn.Sequential):
    """An MLP that regresses a latent from an image grid averaged over its tokens.

    ``forward(grid [batch, width, n_tokens]) -> [batch, d_latent]``; layers: LayerNorm, Linear to
    ``4 * width``, GELU, Linear to ``d_latent`` (state-dict keys ``0.*``, ``1.*``, ``3.*``).
    """

    def __init__(self, width: int, d_latent: int, device: Union[str, torch.device, None] = None) -> None:
        super().__init__(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, d_latent))
        self.to(device)

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        """``[batch, width, n_tokens]`` -> ``[batch, d_latent]``."""
        return super().forward(grid.mean(-1))
