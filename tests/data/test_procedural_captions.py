"""Captions: they name what is built, and the held-out paraphrase set never leaks into training."""
import re

import numpy as np
import pytest

from shap_e.data import CATEGORIES, COLOURS, PROPORTIONS, iter_dataset
from shap_e.data.captions import (
    AUGMENT_CATEGORY_SYNONYMS,
    AUGMENT_COLOUR_SYNONYMS,
    CATEGORY_SYNONYMS,
    COLOUR_SYNONYMS,
    EXTENDED_COLOUR_SYNONYMS,
    GENERIC_NOUNS,
    HELDOUT_TEMPLATES,
    PROPORTION_WORDS,
    TRAIN_TEMPLATES,
    caption,
    heldout_only_words,
    names_heldout_synonym,
    partial_caption,
    training_vocabulary,
    words,
)
from shap_e.data.shapes import MULTI_PART


def _all_captions(paraphrase_set, n_per_object=3):
    rng = np.random.default_rng(0)
    out = []
    for category in CATEGORIES:
        for colour in COLOURS:
            for proportion in PROPORTIONS:
                second = "white" if colour != "white" else "black"
                colours = (colour, second) if category in MULTI_PART else (colour,)
                for _ in range(n_per_object):
                    text = caption(category, colours, proportion, rng, paraphrase_set)
                    out.append((category, colour, proportion, text))
    return out


def test_training_captions_use_only_the_training_vocabulary():
    vocab, heldout = training_vocabulary(), heldout_only_words()
    assert heldout and not vocab & heldout
    for *_, text in _all_captions("train"):
        assert words(text) <= vocab, text


def test_every_heldout_template_has_a_word_no_training_caption_contains():
    vocab = training_vocabulary()
    for template in HELDOUT_TEMPLATES:
        assert words(template.replace("{a_np}", "")) - vocab, template
    for *_, text in _all_captions("heldout", 1):
        assert words(text) - vocab, text  # hence never equal to a training caption


def test_heldout_captions_use_heldout_synonyms_sometimes():
    used = set().union(*(words(text) for *_, text in _all_captions("heldout", 1)))
    assert len(used & heldout_only_words()) >= 20


def test_captions_name_the_category_colour_and_proportion():
    for category, colour, proportion, text in _all_captions("train", 1):
        text = text.replace(",", " ")
        assert any(f" {s} " in f" {text} " for s in CATEGORY_SYNONYMS[category][0]), text
        assert any(f" {s} " in f" {text} " for s in COLOUR_SYNONYMS[colour][0]), text
        if proportion != "regular":
            assert any(f" {s} " in f" {text} " for s in PROPORTION_WORDS[proportion][0]), text


def test_a_second_colour_is_named_with_its_part_only_when_it_differs():
    rng = np.random.default_rng(1)
    two = caption("mushroom", ("red", "white"), "regular", rng)
    assert two.endswith(("white stem", "ivory stem")), two
    one = caption("mushroom", ("red", "red"), "regular", rng)
    assert "stem" not in one and "with" not in one


def test_articles_agree_with_the_next_word():
    for *_, text in _all_captions("train", 1) + _all_captions("heldout", 1):
        tokens = text.replace(",", "").split()
        for article, following in zip(tokens, tokens[1:]):
            if article in ("a", "an"):
                assert (article == "an") == (following[0] in "aeiou"), text


def test_there_are_many_distinct_training_captions():
    texts = {text for *_, text in _all_captions("train")}
    assert len(texts) > 2000
    assert len(TRAIN_TEMPLATES) >= 8 and len(HELDOUT_TEMPLATES) >= 6


def test_heldout_paraphrase_split_captions_are_all_unseen():
    vocab = training_vocabulary()
    for asset in iter_dataset("heldout_paraphrases", 12, seed=0):
        assert words(asset.caption) - vocab, asset.caption


def test_two_colours_for_a_one_part_category_are_rejected():
    with pytest.raises(ValueError, match="one colour"):
        caption("cube", ("red", "blue"), "regular", np.random.default_rng(0))


def test_names_heldout_synonym_flags_only_the_labels_own_heldout_words():
    assert names_heldout_synonym("behold: a jade globe", "sphere", "green") == {"category": True, "colour": True}
    assert names_heldout_synonym("a green ball", "sphere", "green") == {"category": False, "colour": False}
    # whole words and phrases only: "rose" is a training word for pink, "rosy" a held-out one
    assert names_heldout_synonym("a rose box", "cube", "pink")["colour"] is False
    assert names_heldout_synonym("a Rosy box", "cube", "pink")["colour"] is True
    assert names_heldout_synonym("cg visualization of a red conical solid", "cone", "red")["category"] is True
    # another colour's held-out word (the second part's) does not count for the primary colour
    assert names_heldout_synonym("a red mushroom with an amber stem", "mushroom", "red")["colour"] is False
    assert names_heldout_synonym("a teal blob", "blob", "teal") == {"category": False, "colour": False}


def test_heldout_synonyms_name_only_paraphrase_captions_and_only_some_of_them():
    def flags(split):
        return [names_heldout_synonym(a.caption, a.category, a.colours[0]) for a in iter_dataset(split, 96, seed=0)]

    assert not any(f["category"] or f["colour"] for f in flags("train") + flags("heldout_pairs"))
    paraphrases = flags("heldout_paraphrases")
    for slot in ("category", "colour"):
        used = sum(f[slot] for f in paraphrases)
        assert 0 < used < len(paraphrases), slot


def test_augmented_captions_add_words_but_never_a_heldout_one():
    augmented = _all_captions("augmented")
    heldout = heldout_only_words()
    used = set().union(*(words(text) for *_, text in augmented))
    assert not used & heldout
    assert used <= training_vocabulary()
    core = set().union(*(words(text) for *_, text in _all_captions("train")))
    assert len(used - core) >= 60  # most of the AUGMENT_* words occur
    for category, colour, _, text in augmented:
        names = CATEGORY_SYNONYMS[category][0] + AUGMENT_CATEGORY_SYNONYMS[category]
        colours = COLOUR_SYNONYMS[colour][0] + AUGMENT_COLOUR_SYNONYMS[colour]
        padded = f" {text.replace(',', ' ').replace(':', ' ')} "
        assert any(f" {n} " in padded for n in names) and any(f" {c} " in padded for c in colours), text


def test_extended_captions_name_colours_with_the_extended_words_and_never_a_heldout_one():
    extended = _all_captions("extended", n_per_object=6)
    used = set().union(*(words(text) for *_, text in extended))
    assert not used & heldout_only_words()
    assert used <= training_vocabulary()
    augmented_words = set().union(*(words(text) for *_, text in _all_captions("augmented", n_per_object=6)))
    extended_words = set().union(*(words(" ".join(names)) for names in EXTENDED_COLOUR_SYNONYMS.values()))
    assert len((used - augmented_words) & extended_words) >= 100  # most of the new colour words occur
    for category, colour, _, text in extended:
        colours = COLOUR_SYNONYMS[colour][0] + AUGMENT_COLOUR_SYNONYMS[colour] + EXTENDED_COLOUR_SYNONYMS[colour]
        padded = f" {text.replace(',', ' ').replace(':', ' ')} "
        assert any(f" {c} " in padded for c in colours), text
    # every extended word names one colour only, and none repeats a training or augmenting word
    names = [name for table in EXTENDED_COLOUR_SYNONYMS.values() for name in table]
    earlier = {name for colour in COLOUR_SYNONYMS for name in COLOUR_SYNONYMS[colour][0] + AUGMENT_COLOUR_SYNONYMS[colour]}
    assert len(names) == len(set(names)) and not set(names) & earlier


def test_extended_captions_keep_half_their_colour_names_from_the_augmented_words():
    # The extending words take half the draws, not 18 in 26: the words the held-out pairs use stay frequent.
    single_part = [row for row in _all_captions("extended", n_per_object=6) if row[0] not in MULTI_PART]
    extending = 0
    for _, colour, _, text in single_part:
        padded = f" {text.replace(',', ' ').replace(':', ' ')} "
        names = COLOUR_SYNONYMS[colour][0] + AUGMENT_COLOUR_SYNONYMS[colour] + EXTENDED_COLOUR_SYNONYMS[colour]
        # the longest name in the caption is the drawn one ("sky blue" holds "sky", "jet black" holds "jet")
        drawn = max((name for name in names if f" {name} " in padded), key=len)
        extending += drawn in EXTENDED_COLOUR_SYNONYMS[colour]
    assert 0.47 < extending / len(single_part) < 0.53  # uniform draws give 18 / 26 = 0.69


def test_the_augmentation_takes_no_word_from_the_heldout_set():
    # Held-out-only words computed against the datasets' own training vocabulary alone are the same.
    core = set(words(" ".join(TRAIN_TEMPLATES).replace("{a_np}", "").replace("{np}", ""))) | {"a", "an", "with"}
    for table in (CATEGORY_SYNONYMS, COLOUR_SYNONYMS, PROPORTION_WORDS):
        for train, _ in table.values():
            core |= words(" ".join(train))
    core |= {"legs", "stem", "base", "hat"}
    heldout = set(words(" ".join(HELDOUT_TEMPLATES).replace("{a_np}", "")))
    for table in (CATEGORY_SYNONYMS, COLOUR_SYNONYMS, PROPORTION_WORDS):
        for _, extra in table.values():
            heldout |= words(" ".join(extra))
    assert heldout - core == set(heldout_only_words())


def _names_any(text, phrases):
    """Whether `text`, less the template's own "white background", contains one of `phrases` as whole words."""
    padded = " " + " ".join(re.findall(r"[a-z0-9'-]+", text.lower().replace("on a white background", ""))) + " "
    return any(f" {phrase} " in padded for phrase in phrases)


def test_partial_captions_name_only_the_attribute_they_keep():
    rng = np.random.default_rng(0)
    all_colour_names = [n for c in COLOURS for n in COLOUR_SYNONYMS[c][0] + AUGMENT_COLOUR_SYNONYMS[c]]
    all_nouns = [n for c in CATEGORIES for n in CATEGORY_SYNONYMS[c][0] + AUGMENT_CATEGORY_SYNONYMS[c]]
    # "coffee" (brown) is also a word of "coffee table": such shared words say nothing either way
    noun_words, colour_words = set().union(*map(words, all_nouns)), set().union(*map(words, all_colour_names))
    all_colour_names = [n for n in all_colour_names if not words(n) & noun_words]
    all_nouns = [n for n in all_nouns if not words(n) & colour_words]
    parts = ("legs", "stem", "base", "hat")
    seen_generic = set()
    for category in CATEGORIES:
        colours = ("red", "blue") if category in MULTI_PART else ("red",)
        for proportion in PROPORTIONS:
            for _ in range(4):
                shape = partial_caption(category, colours, proportion, rng, "category", "augmented")
                assert _names_any(shape, CATEGORY_SYNONYMS[category][0] + AUGMENT_CATEGORY_SYNONYMS[category]), shape
                assert not _names_any(shape, all_colour_names) and not words(shape) & set(parts), shape
                colour = partial_caption(category, colours, proportion, rng, "colour", "augmented")
                assert _names_any(colour, COLOUR_SYNONYMS["red"][0] + AUGMENT_COLOUR_SYNONYMS["red"]), colour
                assert not _names_any(colour, all_nouns) and not words(colour) & set(parts), colour
                assert not _names_any(colour, COLOUR_SYNONYMS["blue"][0] + AUGMENT_COLOUR_SYNONYMS["blue"]), colour
                seen_generic |= words(colour) & set(GENERIC_NOUNS)
                assert words(shape) | words(colour) <= training_vocabulary()
    assert seen_generic == set(GENERIC_NOUNS)


def test_partial_caption_rejects_an_unknown_attribute_or_category():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="keep must be 'category' or 'colour'"):
        partial_caption("cube", ("red",), "regular", rng, "size")
    with pytest.raises(ValueError, match="unknown category 'teapot'"):
        partial_caption("teapot", ("red",), "regular", rng, "colour")
    with pytest.raises(ValueError, match="unknown colour 'mauve'"):
        partial_caption("cube", ("mauve",), "regular", rng, "colour")
    with pytest.raises(ValueError, match="category 'cube' has one part"):
        partial_caption("cube", ("red", "blue"), "regular", rng, "category")
