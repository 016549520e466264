"""shap_e/models/generation/pretrained_clip.py: the official CLIP wrappers over FrozenCLIP, checked on a
1-layer random CLIP saved to disk (CLIP weights cannot be downloaded in tests)."""
import numpy as np
import pytest
import torch

from shap_e.models.clip import FrozenCLIP, preprocess_images
from shap_e.models.generation.pretrained_clip import FrozenImageCLIP, ImageCLIP


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (40, 30, 3), dtype=np.uint8), None]


def test_frozen_clip_loads_nothing_until_it_embeds_and_knows_the_official_sizes(monkeypatch):
    monkeypatch.delenv("SHAP_E_CLIP", raising=False)
    clip = FrozenImageCLIP(torch.device("cpu"))
    assert (clip.feature_dim, clip.grid_size, clip.grid_feature_dim) == (768, 16, 1024)
    assert clip.grid_shape == (1024, 256)
    assert (FrozenImageCLIP(None, clip_name="ViT-B/32").feature_dim, FrozenImageCLIP(None, clip_name="ViT-B/32").grid_size) == (512, 7)
    assert clip._frozen()._text is None and clip._frozen()._vision is None
    with pytest.raises(ValueError, match=r"unknown FrozenImageCLIP argument\(s\) \['dtype'\]"):
        FrozenImageCLIP(None, dtype=torch.float16)


def test_frozen_clip_of_a_folder_reads_its_sizes_and_embeds_like_frozen_clip(tiny_clip):
    clip = FrozenImageCLIP(None, clip_name=str(tiny_clip))
    reference = FrozenCLIP.from_pretrained(tiny_clip)
    assert (clip.feature_dim, clip.grid_size, clip.grid_feature_dim) == (768, 4, 32)
    torch.testing.assert_close(clip.embed_text(["a chair"]), reference.embed_text(["a chair"]))
    torch.testing.assert_close(clip.embed_images_grid(images()), reference.embed_images_grid(images()))
    torch.testing.assert_close(clip.embed_images(images()), reference.embed_images(images()))


def test_frozen_clip_call_mixes_texts_images_embeddings_and_empty_elements(tiny_clip):
    clip = FrozenImageCLIP(None, clip_name=str(tiny_clip))
    given = torch.nn.functional.normalize(torch.randn(768), dim=0)
    out = clip(4, texts=["a chair", None, None, None], images=[None, images()[0], None, None],
               embeddings=[None, None, given, None])
    assert out.shape == (4, 768)
    torch.testing.assert_close(out[0], clip.embed_text(["a chair"])[0])
    torch.testing.assert_close(out[1], clip.embed_images([images()[0]])[0])
    torch.testing.assert_close(out[2], given)
    assert not out[3].any()
    with pytest.raises(ValueError, match="more than one of texts/images/embeddings"):
        clip(1, texts=["a"], embeddings=[given])


def test_image_clip_is_trainable_and_ties_every_parameter_into_its_outputs(tiny_clip):
    model = ImageCLIP(None, clip_name=str(tiny_clip))
    assert all(p.requires_grad for p in model.parameters())
    out = model(2, texts=["a chair", None])
    out.sum().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)  # the vision tower too, through the zero-weight tie
    assert any(g.abs().sum() > 0 for g in grads)
    torch.testing.assert_close(out.detach()[0], FrozenCLIP.from_pretrained(tiny_clip).embed_text(["a chair"])[0])
    grid = model.embed_images_grid(images())
    assert grid.shape == (2, 32, 16) and grid.requires_grad
    torch.testing.assert_close(model.images_to_tensor(images()), preprocess_images(images(), 32))


def test_image_clip_without_weights_names_the_download(tmp_path, monkeypatch):
    monkeypatch.delenv("SHAP_E_CLIP", raising=False)
    from shap_e.models.clip import ClipUnavailableError

    with pytest.raises(ClipUnavailableError, match="hf download openai/clip-vit-base-patch32"):
        ImageCLIP(None, clip_name="ViT-B/32", cache_dir=str(tmp_path))
