"""CLIP conditioning: real BPE ids offline, Pillow preprocessing, a tiny random CLIP saved to disk."""
import time
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.models.clip import (
    CLIP_MEAN,
    CLIP_STD,
    ClipTokenizer,
    ClipUnavailableError,
    FrozenCLIP,
    preprocess_images,
)
from shap_e.models.conditioning import PromptTruncatedWarning, conditioning_embeddings

# Ids published by independent CLIP tokenizer implementations (and "a"=320, "red"=736 in vocab.json).
REFERENCE_IDS = {
    "a photo of a cat": [49406, 320, 1125, 539, 320, 2368, 49407],
    "a photo of a dog": [49406, 320, 1125, 539, 320, 1929, 49407],
    "Hello, world!": [49406, 3306, 267, 1002, 256, 49407],
    "A PHOTO of  a Cat!": [49406, 320, 1125, 539, 320, 2368, 256, 49407],
    "a red chair": [49406, 320, 736, 4269, 49407],
}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tokenizer():
    return ClipTokenizer()


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A random CLIPModel (hidden 32, 2 layers, 32 px images, patch 8, projection 24) saved to disk.

    projection_dim is set only at the top level, as in older hub configs, which the towers must honour.
    """
    from transformers import CLIPConfig, CLIPModel

    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    config = CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406,
                         eos_token_id=49407, pad_token_id=0, **common),
        vision_config=dict(image_size=32, patch_size=8, **common),
        projection_dim=24,
    )
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    folder = tmp_path_factory.mktemp("tiny_clip")
    model.save_pretrained(folder)
    return model, folder


def _images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (40, 50, 3), dtype=np.uint8), None,
            Image.fromarray(rng.integers(0, 256, (64, 48, 3), dtype=np.uint8))]


# ---- tokenizer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", sorted(REFERENCE_IDS))
def test_tokenizer_matches_published_clip_ids(tokenizer, text):
    ids = tokenizer.tokenize([text])[0]
    expected = REFERENCE_IDS[text]
    assert ids.dtype == torch.long and ids.shape == (77,)
    assert ids[: len(expected)].tolist() == expected and not ids[len(expected):].any()


def test_single_characters_follow_the_bpe_byte_order(tokenizer):
    # CLIP's byte alphabet starts with the printable ASCII range '!'..'~'; id 256 + i is byte i + "</w>".
    for char in "abcdefghijklmnopqrstuvwxyz0123456789":
        assert tokenizer.encode(char) == [256 + ord(char) - ord("!")]


def test_vocabulary_has_49408_entries(tokenizer):
    assert tokenizer.vocab_size == 49408
    assert tokenizer.tokenize(["x"])[0, 2].item() == 49407


@pytest.mark.parametrize("messy,clean", [
    ("fish &amp; chips", "fish & chips"),
    ("fish &amp;amp; chips", "fish & chips"),
    ("\ufb01sh", "fish"),
    ("caf\u00c3\u00a9", "caf\u00e9"),
    ("  a\n\tred   chair ", "a red chair"),
])
def test_text_is_cleaned_like_clip_before_bpe(tokenizer, messy, clean):
    assert torch.equal(tokenizer.tokenize([messy]), tokenizer.tokenize([clean]))


def test_long_text_is_truncated_keeping_the_end_marker_and_warns_with_the_words_left_out(tokenizer, warned_at):
    text = " ".join(["red chair"] * 37) + " with a blue seat"  # 74 ids of chairs; 'with' is the 75th and last kept
    with pytest.warns(PromptTruncatedWarning, match=r"CLIP reads the first 77 tokens.*: 'a blue seat'") as caught:
        ids = tokenizer.tokenize([text])[0].tolist()
    assert warned_at(caught[0]) == (__file__, "ids = tokenizer.tokenize([text])[0].tolist()")  # the user's line
    assert ids == ([49406] + tokenizer.encode(text))[:76] + [49407]


def test_a_text_that_fills_the_context_exactly_does_not_warn(tokenizer):
    text = " ".join(["red chair"] * 37) + " red"  # 75 BPE ids + the two markers = 77
    with warnings.catch_warnings():
        warnings.simplefilter("error", PromptTruncatedWarning)
        ids = tokenizer.tokenize([text])[0].tolist()
    assert ids[-1] == 49407 and len(tokenizer.encode(text)) == 75


def test_tokenize_rejects_non_strings(tokenizer):
    with pytest.raises(ValueError, match="strings"):
        tokenizer.tokenize(["ok", None])


# ---- preprocessing --------------------------------------------------------------------------------


def test_none_is_a_black_image_normalised_with_clip_statistics():
    pixels = preprocess_images([None])
    assert pixels.shape == (1, 3, 224, 224) and pixels.dtype == torch.float32
    expected = -torch.tensor(CLIP_MEAN) / torch.tensor(CLIP_STD)
    torch.testing.assert_close(pixels[0, :, 100, 7], expected, atol=1e-6, rtol=0)


def test_uniform_image_of_any_aspect_stays_uniform():
    image = np.full((150, 333, 3), (200, 10, 90), dtype=np.uint8)
    pixels = preprocess_images([image])
    expected = (torch.tensor([200, 10, 90]) / 255.0 - torch.tensor(CLIP_MEAN)) / torch.tensor(CLIP_STD)
    torch.testing.assert_close(pixels[0], expected.view(3, 1, 1).expand(3, 224, 224), atol=2e-6, rtol=0)


@pytest.mark.parametrize("width,height,left,top", [
    (448, 224, 112, 0), (224, 300, 0, 38), (225, 224, 0, 0), (224, 227, 0, 2), (229, 224, 2, 0),
])
def test_short_side_224_is_only_centre_cropped(width, height, left, top):
    # Offsets 0.5, 1.5 and 2.5 round half to even (Python's round, as the reference crop does).
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    expected = torch.from_numpy(image[top:top + 224, left:left + 224]).permute(2, 0, 1) / 255.0
    expected = (expected - torch.tensor(CLIP_MEAN).view(3, 1, 1)) / torch.tensor(CLIP_STD).view(3, 1, 1)
    torch.testing.assert_close(preprocess_images([image])[0], expected, atol=1e-6, rtol=0)


def test_resize_is_bicubic_on_the_short_side():
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (100, 150, 3), dtype=np.uint8))
    resized = np.array(image.resize((336, 224), Image.BICUBIC))[:, 56:280]
    expected = (torch.from_numpy(resized).permute(2, 0, 1) / 255.0 - torch.tensor(CLIP_MEAN).view(3, 1, 1))
    expected = expected / torch.tensor(CLIP_STD).view(3, 1, 1)
    torch.testing.assert_close(preprocess_images([image])[0], expected, atol=1e-6, rtol=0)


def test_pil_numpy_and_tensor_inputs_agree():
    array = np.random.default_rng(3).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    a = preprocess_images([array, torch.from_numpy(array), Image.fromarray(array)])
    assert torch.equal(a[0], a[1]) and torch.equal(a[0], a[2])


def test_rgba_is_resized_before_alpha_is_dropped():
    array = np.random.default_rng(4).integers(0, 256, (30, 40, 4), dtype=np.uint8)
    image = Image.fromarray(array)
    reference = image.resize((298, 224), Image.BICUBIC).crop((37, 0, 261, 224)).convert("RGB")
    expected = preprocess_images([reference])[0]
    torch.testing.assert_close(preprocess_images([array])[0], expected, atol=0, rtol=0)
    assert not torch.equal(expected, preprocess_images([array[..., :3]])[0])


def test_float_arrays_are_rejected_with_a_fix():
    with pytest.raises(ValueError, match="uint8"):
        preprocess_images([np.zeros((8, 8, 3), dtype=np.float32)])


# ---- FrozenCLIP on the tiny model ------------------------------------------------------------------


def test_embed_text_is_the_normalised_projection_at_the_end_marker(tiny_clip, tokenizer):
    model, folder = tiny_clip
    texts = ["a red chair", "a photo of a cat"]
    got = FrozenCLIP.from_pretrained(folder).embed_text(texts)
    ids = tokenizer.tokenize(texts)
    with torch.no_grad():
        hidden = model.text_model(input_ids=ids).last_hidden_state
        pooled = hidden[torch.arange(2), ids.argmax(dim=-1)]  # OpenAI CLIP pools at the largest id (EOT)
        ref = model.text_projection(pooled)
    ref = ref / ref.norm(dim=-1, keepdim=True)
    assert got.shape == (2, 24) and got.dtype == torch.float32
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)


def _manual_vision_tokens(model, pixels):
    vision = model.vision_model
    with torch.no_grad():
        tokens = vision.pre_layrnorm(vision.embeddings(pixels))
        return vision.encoder(inputs_embeds=tokens).last_hidden_state


def test_embed_images_grid_drops_class_token_and_skips_post_layernorm(tiny_clip):
    model, folder = tiny_clip
    images = _images()
    grid = FrozenCLIP.from_pretrained(folder).embed_images_grid(images)
    tokens = _manual_vision_tokens(model, preprocess_images(images, 32))
    assert grid.shape == (3, 32, 16)  # [batch, hidden, (32 / 8) ** 2 patches]
    torch.testing.assert_close(grid, tokens[:, 1:].permute(0, 2, 1), atol=1e-6, rtol=0)
    with torch.no_grad():
        normed = model.vision_model.post_layernorm(tokens[:, 1:]).permute(0, 2, 1)
    assert (grid - normed).abs().max() > 1e-2


def test_embed_images_is_the_normalised_projected_class_token(tiny_clip):
    model, folder = tiny_clip
    images = _images()
    got = FrozenCLIP.from_pretrained(folder).embed_images(images)
    with torch.no_grad():
        tokens = _manual_vision_tokens(model, preprocess_images(images, 32))
        ref = model.visual_projection(model.vision_model.post_layernorm(tokens[:, 0]))
    torch.testing.assert_close(got, ref / ref.norm(dim=-1, keepdim=True), atol=1e-6, rtol=0)
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(3), atol=1e-6, rtol=0)


def test_frozen_clip_implements_the_conditioning_protocols_without_loading_weights(tiny_clip):
    from shap_e.models.conditioning import ImageGridConditioner, TextConditioner

    clip = FrozenCLIP.from_pretrained(tiny_clip[1])
    assert isinstance(clip, TextConditioner) and isinstance(clip, ImageGridConditioner)
    assert clip.embedding_dim == 24
    assert clip.grid_shape == (32, 16)
    assert clip._text is None and clip._vision is None


def test_towers_load_lazily_one_at_a_time(tiny_clip):
    clip = FrozenCLIP.from_pretrained(tiny_clip[1])
    assert clip._text is None and clip._vision is None
    clip.embed_text(["a chair"])
    assert clip._text is not None and clip._vision is None
    assert not any(p.requires_grad for p in clip.text_model.parameters())


def test_release_frees_the_towers_and_the_next_use_loads_them_again(tiny_clip, monkeypatch):
    from shap_e.models import clip as clip_module

    monkeypatch.setenv("SHAP_E_CLIP", str(tiny_clip[1]))
    monkeypatch.setattr(clip_module, "_DEFAULT_CLIPS", {})
    clip = clip_module.default_clip()
    first = clip.embed_text(["a chair"])
    clip.embed_images([None])
    clip_module.release_default_clips()
    assert clip._text is None and clip._vision is None
    assert torch.equal(clip.embed_text(["a chair"]), first) and clip._vision is None


def test_missing_clip_download_fails_fast_naming_the_cache(tmp_path):
    import huggingface_hub  # noqa: F401 (import time is not what is measured)

    # Construction is lazy, so no error yet.
    clip = FrozenCLIP.from_pretrained("openai/clip-vit-large-patch14", cache_dir=tmp_path)
    start = time.monotonic()
    with pytest.raises(ClipUnavailableError) as info:
        clip.embed_text(["a chair"])
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert str(tmp_path) in message and "hf download openai/clip-vit-large-patch14" in message


def test_hub_id_already_in_the_cache_loads_offline(tiny_clip, tmp_path):
    # The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<commit>/files}.
    import shutil

    repo = tmp_path / "models--someorg--tiny-clip"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    shutil.copytree(tiny_clip[1], repo / "snapshots" / ("0" * 40))
    clip = FrozenCLIP.from_pretrained("someorg/tiny-clip", cache_dir=tmp_path)
    expected = FrozenCLIP.from_pretrained(tiny_clip[1]).embed_text(["a red chair"])
    torch.testing.assert_close(clip.embed_text(["a red chair"]), expected, atol=0, rtol=0)


def test_folder_without_config_is_rejected(tmp_path):
    with pytest.raises(ClipUnavailableError, match="config.json"):
        FrozenCLIP.from_pretrained(tmp_path).embed_images([None])


# ---- conditioning_embeddings ------------------------------------------------------------------------


class _NoClip:
    def __getattr__(self, name):
        raise AssertionError(f"CLIP was used ({name}) although embeddings were given")


def test_embeddings_bypass_clip_and_missing_rows_are_zero():
    emb = torch.randn(768)
    out = conditioning_embeddings("text", 3, embeddings=[emb, None, emb.double()], clip=_NoClip())
    assert out.shape == (3, 768) and out.dtype == torch.float32
    assert torch.equal(out[0], emb) and not out[1].any() and torch.equal(out[2], emb)
    grid = torch.randn(2, 1024, 256)
    assert torch.equal(conditioning_embeddings("image_grid", 2, embeddings=grid, clip=_NoClip()), grid)


def test_nothing_given_is_all_zero_with_vit_l14_shapes():
    assert torch.equal(conditioning_embeddings("text", 2, clip=_NoClip()), torch.zeros(2, 768))
    assert torch.equal(conditioning_embeddings("image_grid", 1, clip=_NoClip()), torch.zeros(1, 1024, 256))


def test_texts_and_images_are_embedded_per_element(tiny_clip):
    clip = FrozenCLIP.from_pretrained(tiny_clip[1])
    image = _images()[0]
    texts, images = ["a chair", None, None], [None, None, image]
    out = conditioning_embeddings("text", 3, texts=texts, images=images, clip=clip)
    torch.testing.assert_close(out[0], clip.embed_text(["a chair"])[0], atol=1e-6, rtol=0)
    assert not out[1].any()
    torch.testing.assert_close(out[2], clip.embed_images([image])[0], atol=1e-6, rtol=0)


def test_image_grid_none_entry_is_a_black_image_not_zeros(tiny_clip):
    clip = FrozenCLIP.from_pretrained(tiny_clip[1])
    out = conditioning_embeddings("image_grid", 2, images=[_images()[0], None], clip=clip)
    torch.testing.assert_close(out[1], clip.embed_images_grid([None])[0], atol=1e-6, rtol=0)
    assert out[1].abs().sum() > 0


class _TokenCounter:
    """A text-grid conditioner whose grids are easy to check: column i of a caption is its word i's length."""

    embedding_dim = 2

    def embed_text_grid(self, texts, n_tokens):
        grid = torch.zeros(len(texts), 2, n_tokens)
        for row, text in enumerate(texts):
            for i, word in enumerate(text.split()[:n_tokens]):
                grid[row, :, i] = len(word)
        return grid


def test_text_grids_embed_texts_zero_missing_rows_and_keep_the_prior_shape():
    out = conditioning_embeddings("text_grid", 3, texts=["a red cube", None, "tall"], clip=_TokenCounter(),
                                  feature_shape=(2, 4))
    assert out.shape == (3, 2, 4)
    assert out[0, 0].tolist() == [1, 3, 4, 0] and not out[1].any() and out[2, 1].tolist() == [4, 0, 0, 0]
    empty = conditioning_embeddings("text_grid", 2, clip=_NoClip(), feature_shape=(2, 4))
    assert torch.equal(empty, torch.zeros(2, 2, 4))
    with pytest.raises(ValueError, match=r"expected \[2, 4\]"):
        conditioning_embeddings("text_grid", 1, embeddings=torch.zeros(1, 2, 5), feature_shape=(2, 4))


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="texts"), "kind="),
    (dict(kind="text_grid", texts=["a", "b"]), "needs feature_shape"),
    (dict(kind="text_grid", images=[None, None], feature_shape=(2, 4)), "not images"),
    (dict(kind="text", texts=["a"]), "batch_size=2"),
    (dict(kind="text", texts="a chair"), "single string"),
    (dict(kind="text", texts=["a", None], embeddings=[torch.zeros(768), None]), "more than one"),
    (dict(kind="image_grid", texts=["a", "b"]), "not texts"),
])
def test_bad_conditioning_arguments_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        conditioning_embeddings(batch_size=2, clip=_NoClip(), **kwargs)
