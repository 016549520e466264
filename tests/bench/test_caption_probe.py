"""The caption probe, with a bag-of-words text encoder whose behaviour is known exactly."""
import pytest
import torch

from bench import caption_probe
from shap_e.data.captions import training_vocabulary, words

VOCAB = sorted(training_vocabulary())


def bag_of_words(texts):
    """One dimension per training word: held-out words embed to nothing, unlike with MiniLM."""
    out = torch.zeros(len(texts), len(VOCAB))
    for i, text in enumerate(texts):
        for w in words(text):
            if w in VOCAB:
                out[i, VOCAB.index(w)] = 1.0
    return out


def test_the_linear_probe_recovers_a_linear_rule():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g)
    labels = (x[:, 2] > 0).long()
    predict = caption_probe.fit_linear_probe(x, labels, 2)
    assert (predict(x) == labels).float().mean() > 0.97


def test_bag_of_words_reads_training_words_and_misses_heldout_colour_synonyms():
    result = caption_probe.caption_probe(bag_of_words, n_train=240, per_asset=4, n_eval=48)
    pairs, paraphrases = result["splits"]["heldout_pairs"], result["splits"]["heldout_paraphrases"]
    assert pairs["category"] > 0.75  # category words are all training words
    heldout_words = set(result["heldout_colour_words_nearest"])
    assert len(heldout_words) == 12
    by_word = paraphrases["colour_by_word"]
    seen = [by_word[w] for w in by_word if w not in heldout_words]
    unseen = [by_word[w] for w in by_word if w in heldout_words]
    assert unseen and seen
    rate = lambda rows: sum(ok for ok, _ in rows) / sum(n for _, n in rows)  # noqa: E731
    assert rate(unseen) < 0.5 < rate(seen)
    text = caption_probe.markdown(result, dict(n_train=240))
    assert "| heldout_pairs | 48 |" in text and "| onyx |" in text


@pytest.mark.parametrize("name", ["n_train", "per_asset", "n_eval"])
def test_counts_below_one_are_rejected_by_name(name):
    kwargs = dict(n_train=2, per_asset=1, n_eval=2)
    kwargs[name] = 0
    with pytest.raises(ValueError, match=f"{name} must be at least 1"):
        caption_probe.caption_probe(bag_of_words, **kwargs)
