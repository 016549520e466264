import math

import pytest
import torch

from shap_e.models.caption_hint import CaptionHint, CaptionHintEncoder, append_hints
from shap_e.models.configs import model_from_config

# a tiny caption-token prior: 3 caption tokens of 16 channels, then the colour hint (4 classes)
HINT_PRIOR = {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "minilm_tokens",
              "colour_hint": 4,
              "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 32, "layers": 1,
                        "heads": 2, "grid_channels": 16, "grid_tokens": 4}}
# the same with a category hint too (5 classes): 3 caption tokens, the colour token, the category token
TWO_HINT_PRIOR = dict(HINT_PRIOR, category_hint=5, inner=dict(HINT_PRIOR["inner"], grid_tokens=5))


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


def fitted_hint(seed=0, n_classes=4, attribute="colour"):
    hint = CaptionHint(16, n_classes, attribute)
    with torch.no_grad():
        for p in hint.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(seed)))
    return hint


@pytest.mark.parametrize("config, names", [(HINT_PRIOR, ["colour_hint"]),
                                            (TWO_HINT_PRIOR, ["category_hint", "colour_hint"])])
def test_the_read_outs_draw_nothing_so_the_rest_of_the_prior_initialises_as_without_them(config, names):
    torch.manual_seed(0)
    plain = model_from_config(dict(config, colour_hint=None, category_hint=None)).state_dict()
    after_plain = torch.rand(3)
    torch.manual_seed(0)
    hinted = model_from_config(config).state_dict()
    assert torch.equal(torch.rand(3), after_plain)
    assert sorted(set(hinted) - set(plain)) == [f"{name}.{layer}.{p}" for name in names
                                                for layer in ("out", "score") for p in ("bias", "weight")]
    for key, value in plain.items():
        assert torch.equal(hinted[key], value), key
    assert all(not v.any() for k, v in hinted.items() if k.split(".")[0] in names)


def test_the_read_outs_are_frozen_so_training_leaves_them_out():
    prior = model_from_config(TWO_HINT_PRIOR)
    assert [h.attribute for h in prior.hints] == ["colour", "category"]
    assert [h.n_classes for h in prior.hints] == [4, 5]
    assert not any(p.requires_grad for h in prior.hints for p in h.parameters())
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


def test_hints_are_appended_in_order_each_read_from_the_caption_tokens_alone():
    colour, category = fitted_hint(0), fitted_hint(1, 5, "category")
    grid = torch.randn(2, 16, 3)
    both = append_hints(grid, [colour, category])
    assert both.shape == (2, 16, 5)
    assert torch.equal(both[:, :, :3], grid)
    assert torch.equal(both[:, :, 3:4], colour.hint_token(grid))
    assert torch.equal(both[:, :, 4:], category.hint_token(grid))
    assert not torch.equal(both[:, :, 3], both[:, :, 4])


def test_encoder_reads_one_token_fewer_per_hint_and_appends_them():
    words, hint = WordGrids(), fitted_hint()
    grid = CaptionHintEncoder(words, [hint]).embed_text_grid(["a ruby cube", "a sphere"], 4)
    assert words.asked == [3]
    caption = WordGrids().embed_text_grid(["a ruby cube", "a sphere"], 3)
    assert torch.equal(grid[:, :, :3], caption)
    assert torch.equal(grid[:, :, 3:], hint.hint_token(caption))
    with pytest.raises(ValueError, match="n_tokens=1 must be at least 2"):
        CaptionHintEncoder(words, [hint]).embed_text_grid(["a cube"], 1)
    two = CaptionHintEncoder(words, [hint, fitted_hint(1, 5, "category")])
    assert two.embed_text_grid(["a ruby cube"], 5).shape == (1, 16, 5)
    assert words.asked[-1] == 3
    with pytest.raises(ValueError, match="n_tokens=2 must be at least 3"):
        two.embed_text_grid(["a cube"], 2)
    with pytest.raises(ValueError, match="at least one hint"):
        CaptionHintEncoder(words, [])


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


def test_a_two_hint_prior_conditions_texts_with_the_colour_then_the_category_token():
    prior = model_from_config(TWO_HINT_PRIOR)
    prior.colour_hint.load_state_dict(fitted_hint().state_dict())
    prior.category_hint.load_state_dict(fitted_hint(1, 5, "category").state_dict())
    prior.set_clip(WordGrids())
    grid = prior.cached_model_kwargs(2, {"texts": ["a red cube", None]})["embeddings"]
    assert grid.shape == (2, 16, 5)
    caption = WordGrids().embed_text_grid(["a red cube"], 3)
    torch.testing.assert_close(grid[:1], append_hints(caption, prior.hints))
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


@pytest.mark.parametrize("change, message", [
    ({"category_hint": "12"}, "category_hint must be the number of category classes"),
    ({"category_hint": 17}, "category_hint=17 classes must be between 1 and the grid's 16 channels"),
    ({"conditioner": "clip"}, "colour_hint reads a caption's token grid"),
])
def test_a_category_hint_the_prior_cannot_read_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        model_from_config(dict(TWO_HINT_PRIOR, **change))


def test_a_read_out_of_an_unknown_attribute_is_refused():
    with pytest.raises(ValueError, match=r"attribute must be one of \['colour', 'category'\], got 'size'"):
        CaptionHint(16, 4, "size")
