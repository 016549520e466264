"""An image prior that owns its grid encoder (`conditioner: grid_encoder`): config checks, state dict,
training-time images and dropout, and sampling from PIL images without CLIP."""
import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.sample import sample_latents
from shap_e.models.configs import model_from_config


def tiny_image_prior(encoder=None, **inner):
    """A 32-number latent (4 tokens x 8 channels) conditioned on 16x16 pictures -> a 16 x 16 grid."""
    return {
        "name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "grid_encoder",
        "image_encoder": {"image_size": 16, "patch_size": 4, "width": 16, "layers": 1, "heads": 2, **(encoder or {})},
        "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 16, "layers": 1, "heads": 2,
                  "grid_channels": 16, "grid_tokens": 16, "time_token_cond": True, "use_pos_emb": True,
                  "cond_drop_prob": 0.1, **inner},
    }


def build(seed=0, **inner):
    torch.manual_seed(seed)
    model = model_from_config(tiny_image_prior(**inner)).eval()
    # The output projection starts at zero, which would hide every effect of the conditioning.
    torch.nn.init.normal_(model.wrapped.output_proj.weight, std=0.5)
    return model


def inputs(batch=2):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 32, generator=g), torch.tensor([3, 40][:batch]),
            torch.rand(batch, 3, 16, 16, generator=g) * 2 - 1)


def photo(seed=0, size=24):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))


def test_state_dict_round_trip_restores_the_encoder_weights():
    a, b = build(seed=0), build(seed=1)
    keys = [k for k in a.state_dict() if k.startswith("image_encoder.")]
    assert "image_encoder.pos_emb" in keys and len(keys) > 10
    x, t, pixels = inputs()
    with torch.no_grad():
        assert not torch.allclose(a(x, t, images=pixels), b(x, t, images=pixels))
        b.load_state_dict(a.state_dict(), strict=True)
        torch.testing.assert_close(b(x, t, images=pixels), a(x, t, images=pixels), rtol=0, atol=0)


def test_images_are_embedded_by_the_owned_encoder_with_gradients():
    model = build()
    x, t, pixels = inputs()
    with torch.no_grad():
        grid = model.image_encoder(pixels)
        torch.testing.assert_close(model(x, t, images=pixels), model(x, t, embeddings=grid))
    model(x, t, images=pixels).square().mean().backward()
    assert all(p.grad is not None for p in model.image_encoder.parameters())
    assert model.image_encoder.stem[0].weight.grad.abs().sum() > 0


def test_dropped_rows_get_exactly_the_unconditional_input_of_the_sampler():
    model = build()
    x, t, pixels = inputs()
    with torch.no_grad():
        dropped = model(x, t, images=pixels, keep=torch.tensor([True, False]))
        unconditional = model(x, t, embeddings=torch.zeros(2, 16, 16))  # what guidance's zeros_like gives
        conditional = model(x, t, images=pixels)
    torch.testing.assert_close(dropped[1], unconditional[1], rtol=0, atol=0)
    torch.testing.assert_close(dropped[0], conditional[0], rtol=0, atol=0)
    assert not torch.allclose(conditional[1], unconditional[1])
    # The model's own CFG dropout (training mode) also zeroes the encoder's grid.
    model.wrapped.cond_drop_prob = 1.0
    model.train()
    with torch.no_grad():
        torch.testing.assert_close(model(x, t, images=pixels), unconditional, rtol=0, atol=0)


def test_cached_model_kwargs_embeds_pil_images_without_clip_or_gradients():
    model = build()
    images = [photo(0), photo(1)]
    cached = model.cached_model_kwargs(2, {"images": images})["embeddings"]
    assert cached.shape == (2, 16, 16) and not cached.requires_grad
    assert model._clip is None  # CLIP never loaded
    with torch.no_grad():
        expected = model.image_encoder.embed_images_grid(images)
        pixels = torch.from_numpy(np.stack([np.asarray(im) for im in images])).permute(0, 3, 1, 2) / 127.5 - 1
        as_tensor = model.cached_model_kwargs(2, {"images": pixels})["embeddings"]
    torch.testing.assert_close(cached, expected)
    torch.testing.assert_close(as_tensor, expected)
    assert not model.cached_model_kwargs(2, {})["embeddings"].any()


def test_sample_latents_conditions_on_a_pil_image():
    model = build()
    diffusion = diffusion_from_config({"schedule": "exp", "timesteps": 64, "mean_type": "x_start"})

    def sample(image):
        return sample_latents(
            batch_size=1, model=model, diffusion=diffusion, model_kwargs=dict(images=[image]),
            guidance_scale=3.0, progress=False, clip_denoised=True, use_fp16=False, use_karras=True,
            karras_steps=2, sigma_min=1e-3, sigma_max=160, s_churn=0,
            generator=torch.Generator().manual_seed(0),
        )

    first, again, other = sample(photo(0)), sample(photo(0)), sample(photo(1, size=40))
    assert first.shape == (1, 32) and torch.isfinite(first).all()
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert not torch.allclose(first, other)


def test_mismatched_encoder_and_prior_shapes_raise_clear_errors():
    with pytest.raises(ValueError, match="set inner.grid_channels to the encoder width"):
        model_from_config(tiny_image_prior(encoder={"width": 32}))
    with pytest.raises(ValueError, match=r"grid_tokens\) = \(16, 16\)"):
        model_from_config(tiny_image_prior(encoder={"patch_size": 8}))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['dropout'\] in the image_encoder config"):
        model_from_config(tiny_image_prior(encoder={"dropout": 0.1}))


def test_encoder_block_and_conditioner_must_go_together():
    config = tiny_image_prior()
    with pytest.raises(ValueError, match="an image_encoder needs conditioner='grid_encoder'"):
        model_from_config({**config, "conditioner": "clip"})
    with pytest.raises(ValueError, match="and an image_encoder config block"):
        model_from_config({k: v for k, v in config.items() if k != "image_encoder"})


def test_images_on_a_prior_without_encoder_and_set_clip_on_one_with_are_rejected():
    x, t, pixels = inputs()
    config = {k: v for k, v in tiny_image_prior().items() if k not in ("image_encoder", "conditioner")}
    clip_prior = model_from_config(config)
    assert not any(k.startswith("image_encoder") for k in clip_prior.state_dict())
    with pytest.raises(ValueError, match="images= needs a prior that owns an image encoder"):
        clip_prior(x, t, images=pixels)
    with pytest.raises(ValueError, match="set_clip does not apply"):
        build().set_clip(object())


def test_a_latent_head_regresses_one_latent_per_picture_from_the_owned_encoder():
    torch.manual_seed(0)
    model = model_from_config(dict(tiny_image_prior(), latent_head=True)).eval()
    assert {k.split(".")[0] for k in model.state_dict()} == {"wrapped", "image_encoder", "latent_head"}
    pictures = [photo(0), photo(1), photo(0)]
    guess = model.regress_latent(3, {"images": pictures})
    assert guess.shape == (3, 32) and not guess.requires_grad
    torch.testing.assert_close(guess[0], guess[2], rtol=0, atol=0)
    assert not torch.allclose(guess[0], guess[1])
    with torch.no_grad():
        grid = model.image_encoder.embed_images_grid(pictures)
        torch.testing.assert_close(guess, model.latent_head.forward(grid))


def test_a_latent_head_needs_the_owned_encoder_pictures_and_a_boolean_switch():
    with pytest.raises(ValueError, match="latent_head must be true or false"):
        model_from_config(dict(tiny_image_prior(), latent_head="yes"))
    no_encoder = {k: v for k, v in tiny_image_prior().items() if k != "image_encoder"}
    with pytest.raises(ValueError, match="own image encoder|grid_encoder"):
        model_from_config(dict(no_encoder, latent_head=True))
    plain = build()
    assert "latent_head" not in {k.split(".")[0] for k in plain.state_dict()}
    with pytest.raises(ValueError, match="no latent head"):
        plain.regress_latent(1, {"images": [photo()]})
    headed = model_from_config(dict(tiny_image_prior(), latent_head=True))
    with pytest.raises(ValueError, match="needs images="):
        headed.regress_latent(1, {})


def test_sampling_from_the_regressed_latent_follows_it_at_low_strength():
    from shap_e.diffusion.sample import regression_start

    torch.manual_seed(0)
    model = model_from_config(dict(tiny_image_prior(), latent_head=True)).eval()
    torch.nn.init.normal_(model.latent_head[3].weight, std=1.0)
    diffusion = diffusion_from_config({"schedule": "cosine", "timesteps": 64, "mean_type": "v"})
    kwargs = {"images": [photo(0), photo(1)]}
    assert regression_start(model, 2, kwargs, 1.0) == {}
    with pytest.raises(ValueError, match="strength"):
        regression_start(model, 2, kwargs, 0.0)
    start = regression_start(model, 2, kwargs, 0.05)
    torch.testing.assert_close(start["init_latent"], model.regress_latent(2, kwargs))

    def draw(**extra):
        return sample_latents(
            batch_size=2, model=model, diffusion=diffusion, model_kwargs=kwargs, guidance_scale=1.0,
            clip_denoised=False, use_fp16=False, use_karras=True, karras_steps=16, sigma_min=1e-3,
            sigma_max=160.0, s_churn=0.0, generator=[torch.Generator().manual_seed(i) for i in range(2)],
            **extra,
        )

    near, free = draw(**start), draw()
    assert (near - start["init_latent"]).abs().mean() < 0.25 * (free - start["init_latent"]).abs().mean()
