import math

import pytest
import torch

from shap_e.models.colour_hint import ColourHint, ColourHintEncoder
from shap_e.models.configs import model_from_config

# a tiny caption-token prior: 3 caption tokens of 16 channels, then the colour hint (4 classes)
HINT_PRIOR = {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "minilm_tokens",
              "colour_hint": 4,
              "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 32, "layers": 1,
                        "heads": 2, "grid_channels": 16, "grid_tokens": 4}}


class WordGrids:
    """A `TextGridConditioner` for the tests: word i of a text is column i, a fixed vector per word."""

    embedding_dim = 16

    def __init__(self):
        self.asked = []

    def embed_text_grid(self, texts, n_tokens):
        self.asked.append(n_tokens)
        grid = torch.zeros(len(texts), 16, n_tokens)
        for row, text in enumerate(texts):
            for column, word in enumerate(text.split()[:n_tokens]):
                grid[row, :, column] = torch.randn(16, generator=torch.Generator().manual_seed(sum(map(ord, word))))
        return grid


def fitted_hint(seed=0):
    hint = ColourHint(16, 4)
    with torch.no_grad():
        for p in hint.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)))
    return hint


def test_the_read_out_draws_nothing_so_the_rest_of_the_prior_initialises_as_without_it():
    torch.manual_seed(0)
    plain = model_from_config(dict(HINT_PRIOR, colour_hint=None)).state_dict()
    after_plain = torch.rand(3)
    torch.manual_seed(0)
    hinted = model_from_config(HINT_PRIOR).state_dict()
    assert torch.equal(torch.rand(3), after_plain)
    assert sorted(set(hinted) - set(plain)) == ["colour_hint.out.bias", "colour_hint.out.weight",
                                                 "colour_hint.score.bias", "colour_hint.score.weight"]
    for key, value in plain.items():
        assert torch.equal(hinted[key], value), key
    assert all(not v.any() for k, v in hinted.items() if k.startswith("colour_hint."))


def test_the_read_out_is_frozen_so_training_leaves_it_out():
    prior = model_from_config(HINT_PRIOR)
    assert not any(p.requires_grad for p in prior.colour_hint.parameters())
    assert all(p.requires_grad for p in prior.wrapped.parameters())


def test_hint_token_holds_the_class_probabilities_at_a_token_norm_and_ignores_padding():
    hint = fitted_hint()
    grid = torch.randn(2, 16, 3)
    padded = torch.cat([grid, torch.zeros(2, 16, 5)], dim=2)
    token = hint.hint_token(grid)
    assert token.shape == (2, 16, 1)
    probabilities = hint(grid).softmax(-1)
    torch.testing.assert_close(token[:, :4, 0], probabilities * math.sqrt(16))
    assert not token[:, 4:].any()
    torch.testing.assert_close(hint.hint_token(padded), token)
    assert torch.equal(hint.append_hint(grid), torch.cat([grid, token], dim=2))


def test_encoder_reads_one_token_fewer_and_appends_the_hint():
    words, hint = WordGrids(), fitted_hint()
    grid = ColourHintEncoder(words, hint).embed_text_grid(["a ruby cube", "a sphere"], 4)
    assert words.asked == [3]
    caption = WordGrids().embed_text_grid(["a ruby cube", "a sphere"], 3)
    assert torch.equal(grid[:, :, :3], caption)
    assert torch.equal(grid[:, :, 3:], hint.hint_token(caption))
    with pytest.raises(ValueError, match="n_tokens=1 must be at least 2"):
        ColourHintEncoder(words, hint).embed_text_grid(["a cube"], 1)


def test_prior_conditions_texts_with_the_hint_and_leaves_unconditional_rows_zero():
    prior = model_from_config(HINT_PRIOR)
    prior.colour_hint.load_state_dict(fitted_hint().state_dict())
    prior.set_clip(WordGrids())
    grid = prior.cached_model_kwargs(2, {"texts": ["a red cube", None]})["embeddings"]
    assert grid.shape == (2, 16, 4)
    caption = WordGrids().embed_text_grid(["a red cube"], 3)[0]
    assert torch.equal(grid[0, :, :3], caption)
    torch.testing.assert_close(grid[0, :, 3], prior.colour_hint.hint_token(caption[None])[0, :, 0])
    assert not grid[1].any()


@pytest.mark.parametrize("change, message", [
    ({"colour_hint": 0}, "colour_hint must be the number of colour classes"),
    ({"colour_hint": True}, "colour_hint must be the number of colour classes"),
    ({"colour_hint": 17}, "colour_hint=17 classes must be between 1 and the grid's 16 channels"),
    ({"conditioner": "clip"}, "colour_hint reads a caption's token grid; it needs conditioner 'minilm_tokens'"),
    ({"conditioner": "minilm", "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 1,
                                         "heads": 2, "cond_width": 16}},
     "colour_hint reads a caption's token grid; it needs conditioner minilm_tokens"),
])
def test_a_colour_hint_the_prior_cannot_read_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        model_from_config(dict(HINT_PRIOR, **change))
