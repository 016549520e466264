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


def ordered_pairs(n: int, n_words: int = 6, seed: int = 0):
    """Two different words per sequence, each token one-hot in word and in position: the label is
    the first word, which the mean over tokens (the same for both orders) cannot tell."""
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, n_words, (n,), generator=g)
    second = (first + torch.randint(1, n_words, (n,), generator=g)) % n_words
    states = torch.zeros(n, 3, n_words + 3)
    for position, word in enumerate((first, second)):
        states[torch.arange(n), position, word] = 1.0
        states[:, position, n_words + position] = 1.0
    mask = torch.tensor([True, True, False]).expand(n, 3).clone()  # the third token is padding
    states[:, 2] = 100.0  # padding must not leak into the pooled state
    return states, mask, first


def test_the_attention_probe_reads_word_order_that_the_mean_cannot():
    states, mask, first = ordered_pairs(600)
    test_states, test_mask, test_first = ordered_pairs(200, seed=1)
    attention = caption_probe.fit_attention_probe((states, mask), first, 6, steps=300, lr=3e-2)
    assert (attention((test_states, test_mask)) == test_first).float().mean() > 0.95
    mean = lambda h, m: (h * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)  # noqa: E731
    linear = caption_probe.fit_linear_probe(mean(states, mask), first, 6)
    assert (linear(mean(test_states, test_mask)) == test_first).float().mean() < 0.7


def test_token_states_of_chunks_are_padded_to_the_longest():
    def token_states(texts):
        n = max(len(t.split()) for t in texts)
        mask = torch.tensor([[i < len(t.split()) for i in range(n)] for t in texts])
        return torch.ones(len(texts), n, 2), mask

    states, mask = caption_probe.token_states_all(token_states, ["a b", "a b c d", "a"], chunk=1)
    assert states.shape == (3, 4, 2) and mask.sum(dim=1).tolist() == [2, 4, 1]
    assert torch.equal(states[0, 2:], torch.zeros(2, 2))


def test_attention_pooling_runs_the_whole_probe_with_token_states():
    def token_states(texts):  # bag of words as one token per word, so pooling can only reweight words
        rows = [[w for w in words(t) if w in VOCAB] or ["a"] for t in texts]
        n = max(len(r) for r in rows)
        states, mask = torch.zeros(len(texts), n, len(VOCAB)), torch.zeros(len(texts), n, dtype=torch.bool)
        for i, row in enumerate(rows):
            for j, w in enumerate(row):
                states[i, j, VOCAB.index(w)], mask[i, j] = 1.0, True
        return states, mask

    result = caption_probe.caption_probe(bag_of_words, n_train=240, per_asset=4, n_eval=48, token_states=token_states)
    assert result["splits"]["heldout_pairs"]["category"] > 0.75
    text = caption_probe.markdown(result, dict(pooling="attention"))
    assert text.startswith("# Caption probe: read-out of MiniLM caption attention-pooled token states")


@pytest.mark.parametrize("name", ["n_train", "per_asset", "n_eval"])
def test_counts_below_one_are_rejected_by_name(name):
    kwargs = dict(n_train=2, per_asset=1, n_eval=2)
    kwargs[name] = 0
    with pytest.raises(ValueError, match=f"{name} must be at least 1"):
        caption_probe.caption_probe(bag_of_words, **kwargs)


def _word_vectors(known):
    """words -> [n, 2 layers, 12]: at layer 0, `known` words are one-hot by their key and the others
    equal (all ones, as near every centroid); at layer 1 the keys are shifted by one, so held-out
    words are nearest another key's centroid."""
    from shap_e.data.captions import COLOUR_SYNONYMS

    keys = list(COLOUR_SYNONYMS)
    owner = {w: keys.index(k) for k, (train, extra) in COLOUR_SYNONYMS.items() for w in train + extra}
    train_words = {w for train, _ in COLOUR_SYNONYMS.values() for w in train}

    def states(word_list):
        out = torch.zeros(len(word_list), 2, len(keys))
        for i, w in enumerate(word_list):
            if w in known:
                out[i, 0, owner[w]] = 1.0
            else:
                out[i, 0] = 1.0
            out[i, 1, (owner[w] + (w not in train_words)) % len(keys)] = 1.0
        return out

    return states


def test_heldout_words_by_layer_counts_words_nearest_their_own_centroid():
    from shap_e.data.captions import COLOUR_SYNONYMS

    every = {w for train, extra in COLOUR_SYNONYMS.values() for w in train + extra}
    assert caption_probe.heldout_words_by_layer(_word_vectors(every), COLOUR_SYNONYMS) == [12, 0]
    known = every - {extra[0] for _, extra in COLOUR_SYNONYMS.values()} | {"ruby", "jade", "sapphire"}
    assert caption_probe.heldout_words_by_layer(_word_vectors(known), COLOUR_SYNONYMS)[0] == 3


class _PieceEncoder:
    """A stand-in `SentenceEncoder`: every character is a word piece (id = its code), the caption gets
    two leading special ids, and the state of a token at layer l is its id times (l + 1)."""

    class _Tokenizer:
        def __call__(self, text, add_special_tokens=True, return_tensors=None):
            if return_tensors == "pt":
                return {"input_ids": torch.tensor([[1, 2] + [ord(c) for c in text[0] if c != " "]])}
            return {"input_ids": [ord(c) for c in text if c != " "]}

    class _Model:
        def __call__(self, input_ids, output_hidden_states=True):
            states = input_ids.float()[..., None]  # [1, tokens, 1]
            return type("Output", (), {"hidden_states": tuple(states * (layer + 1) for layer in range(2))})

    tokenizer, model = _Tokenizer(), _Model()


def test_word_states_average_the_words_own_pieces_wherever_they_sit():
    states = caption_probe.minilm_word_states(_PieceEncoder())(["ok", "n"])
    assert states.shape == (2, 2, 1)
    assert states[0, :, 0].tolist() == [(ord("o") + ord("k")) / 2, ord("o") + ord("k")]
    assert states[1, :, 0].tolist() == [ord("n"), 2 * ord("n")]  # the word's "n", not the one in "thing"
    with pytest.raises(ValueError, match="word pieces of '' do not appear"):
        caption_probe.minilm_word_states(_PieceEncoder())([""])


def test_augmented_captions_fit_the_probes_on_the_text_priors_own_vocabulary():
    from shap_e.data.captions import AUGMENT_TEMPLATES

    augment_starts = {t.split("{")[0] for t in AUGMENT_TEMPLATES if not t.startswith("{")}
    seen = {}
    for vocabulary in ("train", "augmented"):
        texts = []

        def recording(batch, texts=texts):
            texts.extend(batch)
            return bag_of_words(batch)

        caption_probe.caption_probe(recording, n_train=24, per_asset=8, n_eval=4, captions=vocabulary)
        training = texts[:24 * 8]
        seen[vocabulary] = sum(any(t.startswith(s) for s in augment_starts) for t in training)
    assert seen["train"] == 0 and seen["augmented"] > 0
    with pytest.raises(ValueError, match="caption vocabulary"):
        caption_probe.caption_probe(bag_of_words, n_train=2, per_asset=2, n_eval=2, captions="heldout")


def test_layers_without_attention_pooling_is_refused_before_any_encoding(capsys):
    with pytest.raises(SystemExit):
        caption_probe.main(["--layers", "0"])
    assert "--pooling attention" in capsys.readouterr().err
