"""A procedural, seed-deterministic dataset of coloured 3D objects with captions.

Objects are +Z up (Shap-E's world), centred on their bounding-box centre and scaled so that their
largest extent is 1 (0.5 for the "small" proportion, so that size is visible; the encoding code
scales by 2 into the [-1, 1] cube). Vertex colours are sRGB uint8, as trimesh stores them.

Splits (``iter_dataset``/``write_dataset``):

* ``"train"``: (category, colour) pairs outside :data:`HELDOUT_PAIRS`, training captions;
* ``"heldout_pairs"``: only the held-out pairs, training captions (compositional generalisation);
* ``"heldout_paraphrases"``: training pairs, captions from the held-out paraphrase set.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import trimesh

from shap_e.data.captions import caption
from shap_e.data.shapes import CATEGORIES, MULTI_PART, Part, build_parts
from shap_e.util.atomic import write_atomic

__all__ = [
    "COLOURS",
    "HELDOUT_PAIRS",
    "PROPORTIONS",
    "SPLITS",
    "ProceduralAsset",
    "allowed_pairs",
    "generate_asset",
    "iter_dataset",
    "read_captions",
    "write_dataset",
]

COLOURS: Dict[str, Tuple[int, int, int]] = {
    "red": (200, 30, 30),
    "green": (40, 160, 50),
    "blue": (30, 70, 200),
    "yellow": (240, 210, 40),
    "orange": (245, 130, 30),
    "purple": (130, 50, 170),
    "pink": (240, 130, 180),
    "white": (235, 235, 235),
    "black": (25, 25, 25),
    "brown": (120, 75, 40),
    "gray": (128, 128, 128),
    "cyan": (40, 200, 210),
}

# proportion -> (x, y, z) stretch of the canonical object before normalisation.
PROPORTIONS: Dict[str, Tuple[float, float, float]] = {
    "regular": (1.0, 1.0, 1.0),
    "tall": (1.0, 1.0, 1.8),
    "flat": (1.0, 1.0, 0.45),
    "wide": (1.8, 1.0, 1.0),
    "small": (1.0, 1.0, 1.0),
}
_LARGEST_EXTENT = {"small": 0.5}  # every other proportion: 1.0

# One held-out colour per category and one category per colour: each category and each colour still
# appears in training with the 11 other partners.
HELDOUT_PAIRS: Tuple[Tuple[str, str], ...] = (
    ("cube", "purple"),
    ("sphere", "orange"),
    ("cylinder", "pink"),
    ("cone", "cyan"),
    ("torus", "brown"),
    ("pyramid", "gray"),
    ("capsule", "yellow"),
    ("table", "green"),
    ("chair", "red"),
    ("mushroom", "blue"),
    ("lamp", "white"),
    ("snowman", "black"),
)

SPLITS = ("train", "heldout_pairs", "heldout_paraphrases")


@dataclass
class ProceduralAsset:
    """One generated object.

    ``mesh`` holds per-vertex sRGB uint8 RGBA colours (``mesh.visual.vertex_colors [V, 4]``);
    ``colours`` is ``(colour,)`` for one-part categories and ``(primary, secondary)`` for multi-part
    ones (both equal when the object is one colour).
    """

    mesh: trimesh.Trimesh
    category: str
    colours: Tuple[str, ...]
    proportion: str
    caption: str
    seed: int


def _check_name(value: str, valid: Sequence[str], what: str) -> None:
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {list(valid)}")


def _colours_for(
    category: str, colour: str, secondary: Optional[str], rng: np.random.Generator
) -> Tuple[str, ...]:
    if category not in MULTI_PART:
        if secondary is not None:
            raise ValueError(f"secondary_colour is only for {MULTI_PART}; {category!r} has one part")
        return (colour,)
    if secondary is None:
        others = [c for c in COLOURS if c != colour]
        secondary = colour if rng.random() < 0.5 else others[int(rng.integers(len(others)))]
    _check_name(secondary, list(COLOURS), "secondary_colour")
    return (colour, secondary)


def _assemble(parts: List[Part], colours: Tuple[str, ...]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate parts -> ``vertices [V, 3]``, ``faces [F, 3]``, ``rgba [V, 4]`` uint8."""
    vertices, faces, rgba, start = [], [], [], 0
    for part in parts:
        name = colours[1] if part.role == "secondary" else colours[0]
        vertices.append(part.vertices)
        faces.append(part.faces + start)
        rgba.append(np.tile(np.array(COLOURS[name] + (255,), dtype=np.uint8), (len(part.vertices), 1)))
        start += len(part.vertices)
    return np.concatenate(vertices), np.concatenate(faces), np.concatenate(rgba)


def _place(vertices: np.ndarray, proportion: str, rng: np.random.Generator, random_yaw: bool) -> np.ndarray:
    """Stretch by the proportion (with ±10% jitter), turn about +Z if `random_yaw`, centre and
    normalise the bbox."""
    stretch = np.asarray(PROPORTIONS[proportion]) * rng.uniform(0.9, 1.1, size=3)
    angle = rng.uniform(0.0, 2.0 * np.pi)  # drawn either way, so that the option never shifts other draws
    if not random_yaw:
        angle = 0.0
    cos, sin = np.cos(angle), np.sin(angle)
    yaw = np.array([[cos, -sin, 0.0], [sin, cos, 0.0], [0.0, 0.0, 1.0]])
    out = (vertices * stretch) @ yaw.T
    low, high = out.min(axis=0), out.max(axis=0)
    scale = _LARGEST_EXTENT.get(proportion, 1.0) / float((high - low).max())
    return (out - (low + high) / 2) * scale


def generate_asset(
    category: str,
    colour: str,
    proportion: str = "regular",
    seed: int = 0,
    *,
    secondary_colour: Optional[str] = None,
    paraphrase_set: str = "train",
    random_yaw: bool = False,
) -> ProceduralAsset:
    """Build one captioned object; the same arguments always give the same mesh and caption.

    :param colour: the object's (primary) colour, a key of :data:`COLOURS`.
    :param secondary_colour: for multi-part categories (legs, stem, base, hat); None draws it from
        ``seed`` (half the time the primary colour). Must be None for one-part categories.
    :param paraphrase_set: "train" or "heldout" caption vocabulary (see :mod:`shap_e.data.captions`).
        The geometry and colours do not depend on it.
    :param random_yaw: turn the object by a random angle about +Z (from ``seed``). False (the
        default, and the small models' training data) keeps every object in its canonical pose, as
        ShapeNet-style datasets do: trained on random yaws, ``transmitter-small``'s encoder could not
        resolve the turn and averaged over it (boxes came back as cylinders, pyramids as cones).
    """
    _check_name(category, CATEGORIES, "category")
    _check_name(colour, list(COLOURS), "colour")
    _check_name(proportion, list(PROPORTIONS), "proportion")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    # Independent streams: the caption draw never shifts the geometry, and vice versa.
    streams = np.random.SeedSequence(int(seed)).spawn(3)
    shape_rng, colour_rng, caption_rng = (np.random.default_rng(s) for s in streams)
    parts = build_parts(category, shape_rng)
    colours = _colours_for(category, colour, secondary_colour, colour_rng)
    vertices, faces, rgba = _assemble(parts, colours)
    vertices = _place(vertices, proportion, shape_rng, random_yaw)
    mesh = trimesh.Trimesh(vertices=vertices, faces=faces, vertex_colors=rgba, process=False)
    text = caption(category, colours, proportion, caption_rng, paraphrase_set)
    return ProceduralAsset(mesh, category, colours, proportion, text, int(seed))


def allowed_pairs(split: str) -> List[Tuple[str, str]]:
    """The (category, colour) pairs a split draws its primary colour from."""
    _check_name(split, SPLITS, "split")
    if split == "heldout_pairs":
        return list(HELDOUT_PAIRS)
    held = set(HELDOUT_PAIRS)
    return [(cat, col) for cat in CATEGORIES for col in COLOURS if (cat, col) not in held]


def _draw_secondary(category: str, colour: str, rng: np.random.Generator) -> Optional[str]:
    """A second colour that never forms a held-out pair with the category (so held-out pairs stay
    entirely unseen in training), or None for one-part categories."""
    if category not in MULTI_PART:
        return None
    held = set(HELDOUT_PAIRS)
    others = [c for c in COLOURS if c != colour and (category, c) not in held]
    return colour if rng.random() < 0.5 else others[int(rng.integers(len(others)))]


def iter_dataset(
    split: str = "train", n: int = 1000, seed: int = 0, random_yaw: bool = False
) -> Iterator[ProceduralAsset]:
    """Yield ``n`` assets of ``split`` (see :data:`SPLITS`); asset ``i`` depends only on (split, seed, i)
    and ``random_yaw`` (see :func:`generate_asset`), which changes nothing but the object's turn."""
    pairs = allowed_pairs(split)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    proportions = list(PROPORTIONS)
    paraphrase_set = "heldout" if split == "heldout_paraphrases" else "train"
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), SPLITS.index(split), i]))
        category, colour = pairs[int(rng.integers(len(pairs)))]
        proportion = proportions[int(rng.integers(len(proportions)))]
        secondary = _draw_secondary(category, colour, rng)
        yield generate_asset(category, colour, proportion, int(rng.integers(2**31)),
                             secondary_colour=secondary, paraphrase_set=paraphrase_set, random_yaw=random_yaw)


def write_dataset(
    directory: Union[str, Path], n: int, seed: int = 0, split: str = "train", random_yaw: bool = False
) -> Path:
    """Write ``n`` assets as ``{i:06d}.ply`` (binary, vertex colours) plus ``captions.jsonl``.

    Each JSON line: ``file, caption, category, colours, proportion, seed, split, random_yaw``. Every
    file is written atomically; the same arguments give byte-identical files. Returns the jsonl path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, asset in enumerate(iter_dataset(split, n, seed, random_yaw)):
        name = f"{i:06d}.ply"
        write_atomic(directory / name, asset.mesh.export(file_type="ply", encoding="binary"))
        record = dict(file=name, caption=asset.caption, category=asset.category, colours=list(asset.colours),
                      proportion=asset.proportion, seed=asset.seed, split=split, random_yaw=random_yaw)
        lines.append(json.dumps(record, sort_keys=True))
    captions_path = directory / "captions.jsonl"
    write_atomic(captions_path, "".join(line + "\n" for line in lines))
    return captions_path


def read_captions(directory: Union[str, Path]) -> List[dict]:
    """Read the ``captions.jsonl`` records written by :func:`write_dataset`, in file order."""
    path = Path(directory) / "captions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; create it with shap_e.data.write_dataset({str(directory)!r}, n)"
        )
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]

