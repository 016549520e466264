"""Caption vocabulary and templates for the procedural dataset.

Captions are a template filled with a noun phrase ``[proportion] colour noun [with colour2 part]``.
Every slot has synonyms. The words are split in two disjoint paraphrase sets:

* ``"train"``: the templates and synonyms used for training captions;
* ``"heldout"``: extra templates and synonyms that never occur in a training caption. Every held-out
  template contains at least one word absent from the whole training vocabulary, so a held-out
  caption can never equal a training caption (``tests/data`` checks both properties).
"""
import re
from typing import Dict, FrozenSet, Sequence, Tuple

import numpy as np

__all__ = [
    "CATEGORY_SYNONYMS",
    "COLOUR_SYNONYMS",
    "HELDOUT_TEMPLATES",
    "PARAPHRASE_SETS",
    "PROPORTION_WORDS",
    "SECONDARY_PARTS",
    "TRAIN_TEMPLATES",
    "caption",
    "heldout_only_words",
    "training_vocabulary",
    "words",
]

PARAPHRASE_SETS = ("train", "heldout")

# {a_np}: noun phrase with its article ("an orange cube"); {np}: the bare noun phrase.
TRAIN_TEMPLATES: Tuple[str, ...] = (
    "{a_np}",
    "{np}",
    "a 3d model of {a_np}",
    "a render of {a_np}",
    "{a_np}, 3d render",
    "a photo of {a_np}",
    "there is {a_np}",
    "a picture of {a_np}",
)
HELDOUT_TEMPLATES: Tuple[str, ...] = (
    "an illustration depicting {a_np}",
    "{a_np} shown in isolation",
    "cg visualization of {a_np}",
    "here we see {a_np}",
    "a digital sculpture of {a_np}",
    "behold: {a_np}",
)

# category -> (train synonyms, held-out synonyms)
CATEGORY_SYNONYMS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "cube": (("cube", "box", "block"), ("cuboid",)),
    "sphere": (("sphere", "ball", "orb"), ("globe",)),
    "cylinder": (("cylinder", "tube", "can"), ("drum",)),
    "cone": (("cone", "cone shape"), ("conical solid",)),
    "torus": (("torus", "donut", "ring"), ("doughnut",)),
    "pyramid": (("pyramid", "square pyramid"), ("pyramidal solid",)),
    "capsule": (("capsule", "pill"), ("lozenge",)),
    "table": (("table", "desk"), ("dining table",)),
    "chair": (("chair", "seat"), ("side chair",)),
    "mushroom": (("mushroom", "toadstool"), ("fungus",)),
    "lamp": (("lamp", "table lamp"), ("reading lamp",)),
    "snowman": (("snowman", "snow man"), ("snow figure",)),
}

# colour -> (train synonyms, held-out synonyms)
COLOUR_SYNONYMS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "red": (("red", "crimson", "scarlet"), ("ruby",)),
    "green": (("green", "emerald"), ("jade",)),
    "blue": (("blue", "cobalt"), ("sapphire",)),
    "yellow": (("yellow", "golden"), ("lemon",)),
    "orange": (("orange", "tangerine"), ("amber",)),
    "purple": (("purple", "violet"), ("amethyst",)),
    "pink": (("pink", "rose"), ("rosy",)),
    "white": (("white", "ivory"), ("pearl",)),
    "black": (("black", "ebony"), ("onyx",)),
    "brown": (("brown", "chocolate"), ("chestnut",)),
    "gray": (("gray", "grey"), ("slate",)),
    "cyan": (("cyan", "turquoise"), ("aqua",)),
}

# proportion -> (train adjectives, held-out adjectives); "regular" objects get no adjective.
PROPORTION_WORDS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "regular": (("",), ("",)),
    "tall": (("tall", "elongated"), ("lofty",)),
    "flat": (("flat", "squat", "low"), ("flattened",)),
    "wide": (("wide", "broad"), ("widened",)),
    "small": (("small", "tiny", "little"), ("miniature",)),
}

# The part painted with the second colour of a multi-part object, and whether it takes an article.
SECONDARY_PARTS: Dict[str, Tuple[str, bool]] = {
    "table": ("legs", False),
    "chair": ("legs", False),
    "mushroom": ("stem", True),
    "lamp": ("base", True),
    "snowman": ("hat", True),
}

_SECONDARY_CLAUSE = "with"


def words(text: str) -> FrozenSet[str]:
    """Lower-case word tokens of ``text`` (letters, digits, apostrophes)."""
    return frozenset(re.findall(r"[a-z0-9']+", text.lower()))


def _article(phrase: str) -> str:
    return "an" if phrase[:1] in "aeiou" else "a"


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _set_index(paraphrase_set: str) -> int:
    if paraphrase_set not in PARAPHRASE_SETS:
        raise ValueError(f"paraphrase_set must be one of {PARAPHRASE_SETS}, got {paraphrase_set!r}")
    return PARAPHRASE_SETS.index(paraphrase_set)


def _synonyms(table: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]], key: str, heldout: bool,
              rng: np.random.Generator, what: str) -> str:
    if key not in table:
        raise ValueError(f"unknown {what} {key!r}; valid: {sorted(table)}")
    train, extra = table[key]
    # Held-out captions mix held-out and training synonyms: the template alone already makes them new.
    return _pick(rng, train + extra if heldout else train)


def caption(
    category: str,
    colours: Sequence[str],
    proportion: str,
    rng: np.random.Generator,
    paraphrase_set: str = "train",
) -> str:
    """Draw one caption for an object.

    :param colours: one colour, or (primary, secondary) for multi-part categories; the secondary
        colour is named only when it differs from the primary one.
    :param rng: the draws (template and synonyms) come from this generator only.
    :param paraphrase_set: "train" uses training templates/synonyms only; "heldout" always uses a
        held-out template (so the caption is never a training caption) and mixes in held-out synonyms.
    """
    heldout = _set_index(paraphrase_set) == 1
    if not 1 <= len(colours) <= 2:
        raise ValueError(f"colours must hold one or two colour names, got {tuple(colours)!r}")
    if len(colours) == 2 and category not in SECONDARY_PARTS:
        raise ValueError(f"category {category!r} has one part; pass one colour, not {tuple(colours)!r}")
    template = _pick(rng, HELDOUT_TEMPLATES if heldout else TRAIN_TEMPLATES)
    noun = _synonyms(CATEGORY_SYNONYMS, category, heldout, rng, "category")
    colour = _synonyms(COLOUR_SYNONYMS, colours[0], heldout, rng, "colour")
    size = _synonyms(PROPORTION_WORDS, proportion, heldout, rng, "proportion")
    np_text = " ".join(w for w in (size, colour, noun) if w)
    if len(colours) == 2 and colours[1] != colours[0]:
        np_text += " " + _secondary_clause(category, colours[1], heldout, rng)
    return template.format(np=np_text, a_np=f"{_article(np_text)} {np_text}")


def _secondary_clause(category: str, colour: str, heldout: bool, rng: np.random.Generator) -> str:
    part, takes_article = SECONDARY_PARTS[category]
    name = _synonyms(COLOUR_SYNONYMS, colour, heldout, rng, "colour")
    phrase = f"{name} {part}"
    if takes_article:
        phrase = f"{_article(phrase)} {phrase}"
    return f"{_SECONDARY_CLAUSE} {phrase}"


def training_vocabulary() -> FrozenSet[str]:
    """Every word any training caption can contain (templates, articles, synonyms, part names)."""
    vocab = set(words(" ".join(TRAIN_TEMPLATES).replace("{a_np}", "").replace("{np}", "")))
    vocab |= {"a", "an", _SECONDARY_CLAUSE}
    for table in (CATEGORY_SYNONYMS, COLOUR_SYNONYMS, PROPORTION_WORDS):
        for train, _ in table.values():
            vocab |= words(" ".join(train))
    vocab |= words(" ".join(part for part, _ in SECONDARY_PARTS.values()))
    return frozenset(vocab)


def heldout_only_words() -> FrozenSet[str]:
    """Words of the held-out templates and synonyms that no training caption contains."""
    found = set(words(" ".join(HELDOUT_TEMPLATES).replace("{a_np}", "")))
    for table in (CATEGORY_SYNONYMS, COLOUR_SYNONYMS, PROPORTION_WORDS):
        for _, extra in table.values():
            found |= words(" ".join(extra))
    return frozenset(found - training_vocabulary())
