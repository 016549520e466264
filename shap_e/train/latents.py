"""Latent datasets for prior training: encode a folder of captioned assets with a transmitter.

`shap-e train latents --stage text|image ...` writes a `LatentDataset` file: the transmitter's
latent of every asset, repeated once per condition, row-aligned with

* text: sentence embeddings of `per_asset` captions drawn from the training templates, or with
  `caption_vocabulary="augmented"` from more templates and synonyms, or `"extended"` from those and
  more colour words (the asset's own
  `captions.jsonl` caption first), with the prior's text encoder; with
  `text_tokens`, each caption's token states instead (`[n, 384, text_tokens]` grids for a
  `conditioner: minilm_tokens` prior);
* image: `per_asset` renders of the asset from photo-like viewpoints around +X (`[3, S, S]` in [-1, 1]).

A text dataset also stores each row's colour and category labels (`colour_labels`: the asset's first
colour; `category_labels`), which a prior's caption hints are fitted to (`shap_e.train.caption_hint_fit`).

With `refine_steps`, each latent is first refined against its asset (`shap_e.encoding.refine_latent`):
sharper shapes for the prior to learn (held-out IoU 0.975 against 0.81 for `transmitter-small`).
"""
from itertools import islice
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from tqdm.auto import tqdm

from shap_e.train.diffusion_training import LatentDataset
from shap_e.util.processes import imap_in_processes

STAGES = ("text", "image")
CAPTION_VOCABULARIES = ("train", "augmented", "extended")
# Image-stage pictures are taken from around +X, so that the object's yaw is visible (when the data
# has random yaws) and a prior can reproduce the world-frame orientation; elevation varies.
IMAGE_AZIMUTH_DEG = (-20.0, 20.0)


def read_assets(directory) -> List[dict]:
    """The `captions.jsonl` records of a dataset folder, with `path` (the mesh file) added."""
    from shap_e.data import read_captions

    directory = Path(directory)
    if not (directory / "captions.jsonl").is_file():
        raise FileNotFoundError(
            f"{directory} has no captions.jsonl; write a dataset with `shap-e dataset {directory} --n N`"
        )
    records = [dict(r, path=str(directory / r["file"])) for r in read_captions(directory)]
    if not records:
        raise ValueError(f"{directory}/captions.jsonl lists no assets")
    return records


@torch.inference_mode()
def encode_assets(
    transmitter: nn.Module, paths: Sequence[str], seed: int = 0, progress: bool = True, cache_dir=None
) -> torch.Tensor:
    """`[n, d_latent]` latents of the mesh files, one at a time (deterministic for a seed).

    cache_dir: where the encoder batches are kept (`load_or_create_multimodal_batch`). A transmitter
    training run with the same seed and `point_candidates: 16384` fills it with the same batches.
    """
    from shap_e.encoding.batch import load_or_create_multimodal_batch

    encoder = transmitter.encoder
    device = next(transmitter.parameters()).device
    transmitter.eval()
    latents = []
    for path in tqdm(paths, desc="encode", disable=not progress):
        batch = load_or_create_multimodal_batch(
            device, model_path=path, random_sample_count=2**14, seed=seed, cache_dir=cache_dir,
            **encoder.batch_options(),
        )
        latents.append(encoder.encode_to_bottleneck(batch, generator=torch.Generator(device=device).manual_seed(seed))[0].cpu())
    return torch.stack(latents)


def _refine_targets(job: Tuple[str, int, Any]):
    """The refinement supervision of one asset, `(path, seed, cache_dir)` (module-level: it runs in workers)."""
    from shap_e.encoding import REFINE_TARGETS
    from shap_e.train.transmitter_training import cached_asset_targets

    path, seed, cache_dir = job
    return cached_asset_targets(path, seed, REFINE_TARGETS, cache_dir)


def refine_assets(
    transmitter: nn.Module, latents: torch.Tensor, paths: Sequence[str], steps: int, seed: int = 0,
    cache_dir=None, batch_size: int = 16, progress: bool = True, workers: int = 1,
) -> torch.Tensor:
    """`shap_e.encoding.refine_latent` of `latents [n, d]` against their assets, `batch_size` at a time.

    The supervision of asset i is `cached_asset_targets(path, seed + i, REFINE_TARGETS, cache_dir)`:
    the cache transmitter training fills with the recipe's `targets`, so nothing is recomputed there.
    The batch starting at asset i draws its per-step samples from a generator seeded with `seed + i`.
    workers: processes that compute the supervision ahead of the refinement (`imap_in_processes`);
        with one torch thread here too, the result is the same for any number.
    """
    from shap_e.encoding import refine_latent

    device = latents.device
    supervision = imap_in_processes(_refine_targets, [(path, seed + i, cache_dir) for i, path in enumerate(paths)],
                                    workers)
    out = []
    for first in tqdm(range(0, len(paths), batch_size), desc="refine", disable=not progress):
        targets = list(islice(supervision, batch_size))  # the next batch's, in order
        generator = torch.Generator().manual_seed(seed + first)
        chunk = latents[first:first + batch_size]
        out.append(refine_latent(transmitter, chunk, targets, steps=steps, generator=generator).to(device))
    return torch.cat(out)


def training_captions(
    record: dict, count: int, seed: int, vocabulary: str = "train", partial: float = 0.0
) -> List[str]:
    """The asset's caption plus `count - 1` more drawn from the `vocabulary` ("train", "augmented"
    for more templates and synonyms, "extended" for more colour words too; `shap_e.data.captions`).

    partial: the share of the extra captions that name one attribute only (attribute dropout,
    `shap_e.data.captions.partial_caption`), half of them the category alone and half the colour
    alone. The choice has its own random stream, so with 0 the captions are those of earlier
    versions, draw for draw.
    """
    from shap_e.data import caption
    from shap_e.data.captions import partial_caption

    if vocabulary not in CAPTION_VOCABULARIES:
        raise ValueError(f"caption vocabulary {vocabulary!r} is unknown; valid: {list(CAPTION_VOCABULARIES)}")
    if not 0.0 <= partial <= 1.0:
        raise ValueError(f"partial={partial} must be a share between 0 and 1")
    rng = np.random.default_rng([seed, int(record.get("seed", 0))])
    choice = np.random.default_rng([seed, int(record.get("seed", 0)), 1])
    args = (record["category"], record["colours"], record["proportion"], rng)
    extra = []
    for _ in range(count - 1):
        if partial and choice.random() < partial:
            extra.append(partial_caption(*args, keep=("category", "colour")[int(choice.integers(2))],
                                         paraphrase_set=vocabulary))
        else:
            extra.append(caption(*args, vocabulary))
    return [record["caption"], *extra]


def text_layers_record(layers: Optional[Sequence[int]]) -> Optional[str]:
    """How a latent file's provenance names the MiniLM hidden states its captions were read from
    ("0,6"; None for the last layer, which records nothing)."""
    return None if layers is None else ",".join(map(str, layers))


def build_latent_dataset(
    transmitter: nn.Module,
    data_dir,
    stage: str,
    per_asset: int = 4,
    seed: int = 0,
    image_size: int = 64,
    text_encoder=None,
    progress: bool = True,
    refine_steps: int = 0,
    cache_dir=None,
    text_tokens: int = 0,
    caption_vocabulary: str = "train",
    workers: int = 1,
    partial_captions: float = 0.0,
    text_layers: Optional[Sequence[int]] = None,
) -> LatentDataset:
    """Encode every asset of `data_dir` and pair it with `per_asset` conditions (see module doc).

    text_encoder: what embeds captions (anything with `embed_text`, or `embed_text_grid` for
        `text_tokens`); MiniLM when None.
    text_tokens: store `[embedding_dim, text_tokens]` token grids of the captions (0: one pooled
        vector per caption); the prior's `grid_tokens`.
    refine_steps: refine each latent against its asset (`refine_assets`, supervision cached in
        `cache_dir` and computed by `workers` processes); 0 keeps the encoder's latents.
    cache_dir: the encoder batches are kept there too (`encode_assets`).
    caption_vocabulary: what the extra captions are drawn from (`training_captions`).
    partial_captions: the share of the extra captions that name only the category or only the colour
        (`training_captions`' `partial`; stage text).
    text_layers: the MiniLM hidden states the captions are read from (`SentenceEncoder`'s `layers`;
        None: the last layer); the prior's `text_layers`. Only without a `text_encoder`.
    """
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r} is unknown; valid: {list(STAGES)}")
    if per_asset < 1:
        raise ValueError(f"per_asset={per_asset} must be at least 1")
    if text_tokens < 0 or (text_tokens and stage != "text"):
        raise ValueError(f"text_tokens={text_tokens} must be 0, or positive for stage 'text'")
    if caption_vocabulary not in CAPTION_VOCABULARIES:
        raise ValueError(f"caption_vocabulary={caption_vocabulary!r} is unknown; valid: {list(CAPTION_VOCABULARIES)}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r} must be an int of at least 1")
    if not 0.0 <= partial_captions <= 1.0 or (partial_captions and stage != "text"):
        raise ValueError(f"partial_captions={partial_captions} must be 0, or a share up to 1 for stage 'text'")
    if text_layers is not None and (stage != "text" or text_encoder is not None):
        raise ValueError("text_layers picks the hidden states of the default MiniLM encoder: give it for stage "
                         "'text' without a text_encoder")
    if stage == "text" and text_encoder is None:
        from shap_e.models.sentence_encoder import SentenceEncoder

        text_encoder = SentenceEncoder.from_package(layers=text_layers)  # checks the layers before encoding
    records = read_assets(data_dir)
    latents = encode_assets(transmitter, [r["path"] for r in records], seed, progress, cache_dir)
    if refine_steps:
        latents = refine_assets(transmitter, latents, [r["path"] for r in records], refine_steps, seed, cache_dir,
                                progress=progress, workers=workers)
    if stage == "text":
        texts = [t for r in records for t in training_captions(r, per_asset, seed, caption_vocabulary, partial_captions)]
        def embed(chunk: List[str]) -> torch.Tensor:
            if text_tokens:
                return text_encoder.embed_text_grid(chunk, text_tokens)
            return text_encoder.embed_text(chunk)

        with torch.inference_mode():
            conditions = torch.cat([embed(texts[i:i + 256]).float().cpu() for i in range(0, len(texts), 256)])
    else:
        from shap_e.train.condition_images import render_condition_images

        conditions = torch.cat([
            render_condition_images(r["path"], per_asset, image_size, seed=seed + i, azimuth_deg=IMAGE_AZIMUTH_DEG)
            for i, r in enumerate(tqdm(records, desc="render", disable=not progress))
        ])
    provenance = dict(stage=stage, n_assets=len(records), per_asset=per_asset, seed=seed, refine_steps=refine_steps)
    provenance.update(dict(caption_vocabulary=caption_vocabulary, text_tokens=text_tokens,
                           partial_captions=partial_captions) if stage == "text"
                      else dict(image_size=image_size))
    if text_layers is not None:
        provenance["text_layers"] = text_layers_record(text_layers)
    colours, categories = (colour_labels(records), category_labels(records)) if stage == "text" else (None, None)
    return LatentDataset(latents.repeat_interleave(per_asset, dim=0), conditions,
                         {key: str(value) for key, value in provenance.items()},
                         None if colours is None else colours.repeat_interleave(per_asset),
                         None if categories is None else categories.repeat_interleave(per_asset))


def colour_labels(records: Sequence[dict]) -> Optional[torch.Tensor]:
    """`[n]` int64: each asset's first colour as an index into `shap_e.data.COLOURS` (the labels of a
    prior's colour hint); None when an asset has no colours or one outside that list."""
    from shap_e.data import COLOURS

    return _class_indices([(r.get("colours") or [None])[0] for r in records], COLOURS)


def category_labels(records: Sequence[dict]) -> Optional[torch.Tensor]:
    """`[n]` int64: each asset's category as an index into `shap_e.data.CATEGORIES` (the labels of a
    prior's category hint); None when an asset has no category or one outside that list."""
    from shap_e.data import CATEGORIES

    return _class_indices([r.get("category") for r in records], CATEGORIES)


def _class_indices(values: Sequence[Optional[str]], classes: Sequence[str]) -> Optional[torch.Tensor]:
    """`[n]` int64 index of each value in `classes`; None if any value is missing or not a class."""
    names = list(classes)
    if not all(value in names for value in values):
        return None
    return torch.tensor([names.index(value) for value in values], dtype=torch.int64)

