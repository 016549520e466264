"""Frozen CLIP ViT-L/14 conditioning (docs/behaviour.md#clip) through `transformers`, loaded only when used.

* Text: OpenAI's cleaning (ftfy, double html-unescape, whitespace) then the real CLIP BPE from
  `instant-clip-tokenizer` (offline, 49,408 ids), `CLIPTextModelWithProjection`, L2-normalised.
* Images: Pillow preprocessing identical to CLIP's (bicubic resize of the short side, centre crop,
  CLIP mean/std), `CLIPVisionModelWithProjection`: `image_embeds` normalised for the vector form;
  the grid form is the transformer output before `post_layernorm`, class token dropped, channel-major.
"""
import html
import os
import re
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image

from shap_e.util.prompt_warnings import warn_truncated_prompt

__all__ = [
    "CLIP_MEAN",
    "CLIP_STD",
    "DEFAULT_CLIP",
    "ClipTokenizer",
    "ClipUnavailableError",
    "FrozenCLIP",
    "clean_text",
    "preprocess_images",
    "default_clip",
    "release_default_clips",
]

DEFAULT_CLIP = "openai/clip-vit-large-patch14"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
VOCAB_SIZE = 49408
SOT, EOT = 49406, 49407

ImageLike = Union[Image.Image, np.ndarray, torch.Tensor, None]


class ClipUnavailableError(FileNotFoundError):
    """The CLIP weights are neither on disk nor downloadable right now."""


def clean_text(text: str) -> str:
    """CLIP's text cleaning: ftfy repair, html-unescape twice, collapse whitespace, strip."""
    import ftfy

    text = html.unescape(html.unescape(ftfy.fix_text(text)))
    return re.sub(r"\s+", " ", text).strip()


class ClipTokenizer:
    """The OpenAI CLIP BPE tokenizer (`clip.tokenize(..., truncate=True)` semantics), fully offline."""

    def __init__(self) -> None:
        from instant_clip_tokenizer import Tokenizer

        self._bpe = Tokenizer()
        # The vocabulary is 256 bytes, 256 end-of-word bytes, 48,894 merges, then the two markers.
        if (self._bpe.start_of_text(), self._bpe.end_of_text()) != (SOT, EOT):
            raise RuntimeError("instant-clip-tokenizer does not carry the 49,408-entry CLIP vocabulary")
        self.vocab_size = VOCAB_SIZE

    def encode(self, text: str) -> List[int]:
        """BPE ids of one cleaned, lower-cased text, without start/end markers."""
        return [int(i) for i in self._bpe.encode(clean_text(text).lower())]

    def tokenize(self, texts: Union[str, Sequence[str]], context_length: int = 77) -> torch.Tensor:
        """`[batch, context_length]` int64 ids: start marker, BPE ids, end marker, zero padding.

        Texts that are too long are cut so that the last kept position holds the end marker, with a
        ``PromptTruncatedWarning`` naming the words left out.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a string or a sequence of strings")
        if context_length < 2:
            raise ValueError(f"context_length={context_length} must be at least 2 (start and end markers)")
        out = torch.zeros(len(texts), context_length, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = [SOT] + self.encode(text) + [EOT]
            if len(ids) > context_length:
                warn_truncated_prompt(text, self._bpe.decode(ids[context_length - 1:-1]), context_length, "CLIP")
                ids = ids[: context_length - 1] + [EOT]
            out[row, : len(ids)] = torch.tensor(ids)
        return out


def _to_pil(image: ImageLike) -> Image.Image:
    """PIL image from PIL / uint8 HWC (or HW) array or tensor; `None` is a 64x64 black image."""
    if image is None:
        return Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8))
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise ValueError(
                f"image arrays must be uint8 [H, W] or [H, W, C] (got {image.dtype} {list(image.shape)}); "
                "convert with (x * 255).round().clip(0, 255).astype(np.uint8) first"
            )
        image = Image.fromarray(image)
    if not isinstance(image, Image.Image):
        raise ValueError(f"unsupported image type {type(image).__name__}; use PIL, numpy or torch")
    return image


def _resize_crop(image: Image.Image, size: int) -> Image.Image:
    """Bicubic resize of the short side to `size`, then centre crop, as CLIP's preprocessing does."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)  # truncation, like the reference resize
    new_size = (size, new_long) if width <= height else (new_long, size)
    if new_size != image.size:
        image = image.resize(new_size, Image.BICUBIC)
    width, height = image.size
    left, top = int(round((width - size) / 2.0)), int(round((height - size) / 2.0))
    return image.crop((left, top, left + size, top + size))


def preprocess_images(images: Sequence[ImageLike], size: int = 224) -> torch.Tensor:
    """CLIP pixel values `[batch, 3, size, size]` float32 (resize, centre crop, mean/std)."""
    if isinstance(images, (Image.Image, np.ndarray, torch.Tensor)) or images is None:
        raise ValueError("images must be a list of images (PIL, uint8 HWC arrays or tensors, or None)")
    # RGB conversion comes after resizing, as in CLIP: RGBA is resized with premultiplied alpha.
    crops = [_resize_crop(_to_pil(img), size).convert("RGB") for img in images]
    arrays = [np.asarray(crop, dtype=np.float32) / 255.0 for crop in crops]
    pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    return (pixels - mean) / std


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host accepts a TCP connection; the daemon thread bounds a hanging DNS look-up."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    result: List[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return bool(result and result[0])


def _cached_snapshot(repo_id: str, cache_dir: Optional[str]) -> bool:
    """True when the hub cache holds a config and a weights file for `repo_id`."""
    from huggingface_hub import try_to_load_from_cache

    def have(name: str) -> bool:
        return isinstance(try_to_load_from_cache(repo_id, name, cache_dir=cache_dir), str)

    return have("config.json") and (have("model.safetensors") or have("pytorch_model.bin"))


def _missing_message(repo_id: str, cache_dir: Optional[str], why: str) -> str:
    from huggingface_hub import constants

    cache = cache_dir or constants.HF_HUB_CACHE
    flag = f" --cache-dir '{cache_dir}'" if cache_dir else ""
    return (
        f"CLIP weights {repo_id!r} are not in the Hugging Face cache at {cache} and {why}.\n"
        f"Download them once with network access:\n"
        f"  hf download {repo_id} config.json model.safetensors{flag}\n"
        "or pass the path of a folder holding config.json and model.safetensors as name_or_dir."
    )


@contextmanager
def quiet_transformers():
    """Silence the load report and progress bar of `from_pretrained` (we check the keys ourselves)."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


class FrozenCLIP:
    """CLIP text and vision towers in eval mode; each tower is loaded on its first use."""

    def __init__(
        self,
        name_or_dir: Union[str, Path, None] = None,
        cache_dir: Optional[Union[str, Path]] = None,
        device: Union[str, torch.device, None] = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        from shap_e.util.config import resolve_device

        # $SHAP_E_CLIP points every default CLIP at a local copy (a `save_pretrained` folder).
        self.name_or_dir = str(name_or_dir or os.environ.get("SHAP_E_CLIP") or DEFAULT_CLIP)
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self.device = resolve_device(device) or torch.device("cpu")
        self.dtype = dtype
        self._source: Optional[Tuple[str, bool]] = None
        self._text: Any = None
        self._vision: Any = None
        self._tokenizer: Optional[ClipTokenizer] = None

    @classmethod
    def from_pretrained(
        cls,
        name_or_dir: Union[str, Path, None] = None,
        cache_dir: Optional[Union[str, Path]] = None,
        device: Union[str, torch.device, None] = None,
    ) -> "FrozenCLIP":
        """A lazy CLIP: a hub id or a local `save_pretrained` folder (default: `$SHAP_E_CLIP`, else
        ViT-L/14 from the Hugging Face hub cache)."""
        return cls(name_or_dir, cache_dir=cache_dir, device=device)

    def _resolve(self) -> Tuple[str, bool]:
        """(where to load from, local_files_only); raises ClipUnavailableError instead of hanging."""
        if self._source is None:
            path = Path(self.name_or_dir).expanduser()
            if path.is_dir():
                if not (path / "config.json").is_file():
                    raise ClipUnavailableError(f"{path} has no config.json; it is not a CLIP model folder")
                self._source = (str(path), True)
            elif _cached_snapshot(self.name_or_dir, self.cache_dir):
                self._source = (self.name_or_dir, True)
            elif _hub_offline() or not _hub_reachable():
                why = "HF_HUB_OFFLINE is set" if _hub_offline() else "the hub is unreachable"
                raise ClipUnavailableError(_missing_message(self.name_or_dir, self.cache_dir, why))
            else:
                self._source = (self.name_or_dir, False)
        return self._source

    def _config(self) -> Any:
        """The full `CLIPConfig` (cheap: no weights are read)."""
        from transformers import CLIPConfig

        source, local_only = self._resolve()
        return CLIPConfig.from_pretrained(source, cache_dir=self.cache_dir, local_files_only=local_only)

    @property
    def embedding_dim(self) -> int:
        """Width of `embed_text`/`embed_images` (768 for ViT-L/14): the `TextConditioner` protocol."""
        return self._config().projection_dim

    @property
    def grid_shape(self) -> Tuple[int, int]:
        """`(channels, patches)` of `embed_images_grid` ((1024, 256) for ViT-L/14)."""
        vision = self._config().vision_config
        return vision.hidden_size, (vision.image_size // vision.patch_size) ** 2

    def _load(self, model_class: Any, tower: str) -> Any:
        """Load one tower (`tower` = "text_config" or "vision_config") from a full CLIP checkpoint."""
        source, local_only = self._resolve()
        where = dict(cache_dir=self.cache_dir, local_files_only=local_only)
        full = self._config()
        # Older hub configs keep projection_dim only at the top level; the towers need it too.
        config = getattr(full, tower)
        config.projection_dim = full.projection_dim
        with quiet_transformers():
            model, info = model_class.from_pretrained(
                source, config=config, dtype=self.dtype, output_loading_info=True, **where
            )
        bad = list(info.get("missing_keys", [])) + [str(k) for k in info.get("mismatched_keys", [])]
        if bad:
            raise ValueError(
                f"CLIP checkpoint {source} lacks or mis-shapes {len(bad)} weights, e.g. {bad[:3]}"
            )
        return model.to(self.device).eval().requires_grad_(False)

    @property
    def tokenizer(self) -> ClipTokenizer:
        if self._tokenizer is None:
            self._tokenizer = ClipTokenizer()
        return self._tokenizer

    @property
    def text_model(self) -> Any:
        """`transformers.CLIPTextModelWithProjection`, loaded on first access."""
        if self._text is None:
            from transformers import CLIPTextModelWithProjection

            self._text = self._load(CLIPTextModelWithProjection, "text_config")
        return self._text

    @property
    def vision_model(self) -> Any:
        """`transformers.CLIPVisionModelWithProjection`, loaded on first access."""
        if self._vision is None:
            from transformers import CLIPVisionModelWithProjection

            self._vision = self._load(CLIPVisionModelWithProjection, "vision_config")
        return self._vision

    def release(self) -> None:
        """Drop the loaded towers, freeing their memory; each loads again on its next use."""
        self._text = None
        self._vision = None

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """`embed_text` with gradients (for a trainable copy, `ImageCLIP`)."""
        model = self.text_model
        ids = self.tokenizer.tokenize(texts, model.config.max_position_embeddings).to(self.device)
        emb = model(input_ids=ids).text_embeds.float()
        return emb / torch.linalg.norm(emb, dim=-1, keepdim=True)

    def pixels(self, images: Sequence[ImageLike]) -> torch.Tensor:
        """CLIP's preprocessing: `[batch, 3, size, size]` pixel values on this CLIP's device and dtype."""
        size = self.vision_model.config.image_size
        return preprocess_images(images, size).to(self.device, self.dtype)

    def image_features(self, images: Sequence[ImageLike]) -> torch.Tensor:
        """`embed_images` with gradients."""
        emb = self.vision_model(pixel_values=self.pixels(images)).image_embeds.float()
        return emb / torch.linalg.norm(emb, dim=-1, keepdim=True)

    def image_grid_features(self, images: Sequence[ImageLike]) -> torch.Tensor:
        """`embed_images_grid` with gradients."""
        hidden = self.vision_model(pixel_values=self.pixels(images)).last_hidden_state
        return hidden[:, 1:, :].permute(0, 2, 1).float().contiguous()

    @torch.no_grad()
    def embed_text(self, texts: Sequence[str]) -> torch.Tensor:
        """`[batch, projection_dim]` (768 for ViT-L/14) L2-normalised float32 text embeddings."""
        return self.text_features(texts)

    @torch.no_grad()
    def embed_images(self, images: Sequence[ImageLike]) -> torch.Tensor:
        """`[batch, projection_dim]` L2-normalised float32 image embeddings."""
        return self.image_features(images)

    @torch.no_grad()
    def embed_images_grid(self, images: Sequence[ImageLike]) -> torch.Tensor:
        """`[batch, hidden, n_patches]` ([B, 1024, 256] for ViT-L/14) patch features, float32.

        `last_hidden_state` of the vision tower is the transformer output before `post_layernorm`
        (which only touches the pooled class token), as docs/behaviour.md#clip requires.
        """
        return self.image_grid_features(images)


_DEFAULT_CLIPS: dict = {}


def default_clip(device: Union[str, torch.device, None] = None) -> FrozenCLIP:
    """One shared lazy ViT-L/14 per device (nothing is loaded until it embeds something)."""
    key = (str(device or "cpu"), os.environ.get("SHAP_E_CLIP"))
    if key not in _DEFAULT_CLIPS:
        _DEFAULT_CLIPS[key] = FrozenCLIP.from_pretrained(device=device)
    return _DEFAULT_CLIPS[key]


def release_default_clips() -> None:
    """Free the towers of every shared `default_clip` (each loads again when next used): what a
    pipeline calls once its prompts or pictures are embedded and only the prior is needed."""
    for clip in _DEFAULT_CLIPS.values():
        clip.release()
