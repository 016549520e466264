"""Image helpers of the official `shap_e.util.image_util` (official path and behaviour): load,
crop, resize, alpha handling and tiling of PIL images and HWC arrays/tensors."""
from typing import Any, List, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

__all__ = ["center_crop", "get_alpha", "load_image", "make_tile", "remove_alpha", "resize", "round_up"]

ImageLike = Union[Image.Image, torch.Tensor, np.ndarray]
BACKGROUNDS = ("random", "black", "white")


def load_image(image_path: str) -> Image.Image:
    """The image in the file as it is stored (mode and size unchanged: no RGB conversion), read
    fully so that the file is closed."""
    with open(image_path, "rb") as f:
        image = Image.open(f)
        image.load()
    return image


def center_crop(img: ImageLike) -> ImageLike:
    """The central square of a PIL image or an HWC array/tensor, of side min(height, width)."""
    height, width = (img.size[1], img.size[0]) if isinstance(img, Image.Image) else img.shape[:2]
    side = min(height, width)
    top, left = (height - side) // 2, (width - side) // 2
    if isinstance(img, Image.Image):
        return img.crop((left, top, left + side, top + side))
    return img[top:top + side, left:left + side]


def resize(
    img: ImageLike, *, height: int, width: int, min_value: Optional[Any] = None, max_value: Optional[Any] = None,
) -> ImageLike:
    """Area-average resize (for downsampling) of a PIL image or an HW / HWC array or tensor, in
    float, clamped to [min_value, max_value] and cast back to the input's type and dtype (a cast
    to an integer dtype truncates, as the official code does)."""
    if isinstance(img, Image.Image):
        return Image.fromarray(resize(np.array(img), height=height, width=width, min_value=min_value,
                                      max_value=max_value))
    pixels = torch.from_numpy(img) if isinstance(img, np.ndarray) else img
    hwc = pixels if pixels.ndim == 3 else pixels[..., None]
    out = F.interpolate(hwc.permute(2, 0, 1)[None].float(), size=(height, width), mode="area")[0]
    if min_value is not None or max_value is not None:
        out = out.clamp(min_value, max_value)
    out = out.permute(1, 2, 0).to(pixels.dtype)
    out = out if pixels.ndim == 3 else out[..., 0]
    return out.numpy() if isinstance(img, np.ndarray) else out


def get_alpha(img: Image.Image) -> Image.Image:
    """The alpha channel as an 'L' image; all 255 (opaque) for an image without one."""
    if isinstance(img, Image.Image) and "A" in img.getbands():
        return img.getchannel("A")
    pixels = np.asarray(img)
    if pixels.ndim == 3 and pixels.shape[2] == 4:
        return Image.fromarray(np.ascontiguousarray(pixels[:, :, 3]))
    return Image.fromarray(np.full(pixels.shape[:2], 255, dtype=np.uint8))


def remove_alpha(img: Image.Image, mode: str = "random", *, rng: Optional[np.random.Generator] = None) -> Image.Image:
    """An RGB image with the transparent parts over a background; an image without alpha is
    returned unchanged.

    :param mode: "black" or "white" (blended in float and rounded), or "random": one of a black,
        a uniform grey, a checkerboard or a noise background, drawn from `rng` (default: seeded from
        NumPy's global RNG, so `np.random.seed` makes it repeatable), as augmentation.
    """
    if mode not in BACKGROUNDS:
        raise ValueError(f"mode={mode!r} is unknown; use one of {list(BACKGROUNDS)}")
    if not _has_alpha(img):
        return img
    rgba = img.convert("RGBA")
    if mode == "random":
        rng = rng if rng is not None else np.random.default_rng(np.random.randint(2**31))
        background = Image.fromarray(_random_background(rng, rgba.height, rgba.width))
        return Image.composite(rgba.convert("RGB"), background, rgba.getchannel("A"))
    pixels = np.asarray(rgba).astype(np.float64)
    alpha = pixels[:, :, 3:] / 255
    background = 0.0 if mode == "black" else 255.0
    return Image.fromarray(np.round(pixels[:, :, :3] * alpha + background * (1 - alpha)).astype(np.uint8))


def _has_alpha(img: Image.Image) -> bool:
    if isinstance(img, Image.Image):
        return "A" in img.getbands() or "transparency" in img.info
    pixels = np.asarray(img)
    return pixels.ndim == 3 and pixels.shape[2] == 4


def _random_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """`[height, width, 3]` uint8: black, a uniform grey, a two-colour checkerboard (square side
    log-uniform in [1, min side], random phase) or uniform noise, each with probability 1/4."""
    kind = rng.integers(4)
    if kind == 0:
        return np.zeros((height, width, 3), np.uint8)
    if kind == 1:
        return np.full((height, width, 3), rng.integers(256), np.uint8)
    if kind == 2:
        side = int(np.ceil(np.exp(rng.uniform() * np.log(min(height, width)))))
        cols = (np.arange(width) + rng.integers(side + 1)) // side
        rows = (np.arange(height) + rng.integers(side + 1)) // side
        first = ((rows[:, None] + cols[None, :]) % 2 == 0)[..., None]
        colours = rng.integers(256, size=2)
        return np.where(first, colours[0], colours[1]).repeat(3, axis=2).astype(np.uint8)
    return rng.integers(256, size=(height, width, 3)).astype(np.uint8)


def make_tile(images: List[Union[np.ndarray, Image.Image]], columns: int = 8) -> Image.Image:
    """One RGB image with `images` (equal-size uint8 HWC arrays or PIL images) in rows of
    `columns`, row-major; the last row is padded with black."""
    arrays = [np.asarray(im.convert("RGB")) if isinstance(im, Image.Image) else np.asarray(im) for im in images]
    if not arrays:
        raise ValueError("images is empty; pass at least one image")
    height, width = arrays[0].shape[:2]
    for k, array in enumerate(arrays):
        if array.shape != (height, width, 3) or array.dtype != np.uint8:
            raise ValueError(f"images[{k}] is {array.dtype} {list(array.shape)}; every image must be uint8 "
                             f"[{height}, {width}, 3] like images[0]")
    rows = round_up(len(arrays), columns) // columns
    grid = np.zeros((rows * height, columns * width, 3), np.uint8)
    for k, array in enumerate(arrays):
        row, col = divmod(k, columns)
        grid[row * height:(row + 1) * height, col * width:(col + 1) * width] = array
    return Image.fromarray(grid)


def round_up(n: int, b: int) -> int:
    """The smallest multiple of `b` that is at least `n`."""
    return (n + b - 1) // b * b
