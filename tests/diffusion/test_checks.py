"""`sample_latents` refuses non-finite or out-of-range numbers, non-string texts and a diffusion the
model was not trained with, and never returns NaN or infinity."""
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.sample import sample_latents
from shap_e.util.errors import InvalidArgumentError, NonFiniteError


@pytest.fixture(scope="module")
def diffusion(d):
    return diffusion_from_config(d["config"]["diffusion"])


def _call(batch_size, model, diffusion, model_kwargs, guidance, steps=2, sigma_min=1e-3, sigma_max=160.0,
          s_churn=0.0, clip_denoised=True, **kwargs):
    """`sample_latents` with the official notebooks' Karras settings (keyword-only, as the official API)."""
    return sample_latents(batch_size=batch_size, model=model, diffusion=diffusion, model_kwargs=model_kwargs,
                          guidance_scale=guidance, clip_denoised=clip_denoised, use_fp16=False, use_karras=True,
                          karras_steps=steps, sigma_min=sigma_min, sigma_max=sigma_max, s_churn=s_churn, **kwargs)


def _sample(model, diffusion, emb, guidance=3.0, steps=4, **kwargs):
    return _call(len(emb), model, diffusion, dict(embeddings=emb), guidance, steps=steps,
                 generator=torch.Generator().manual_seed(0), **kwargs)


@pytest.mark.parametrize("guidance", [float("nan"), float("inf"), -float("inf"), 1e30])
def test_non_finite_or_huge_guidance_is_refused_by_name(model, diffusion, d, guidance):
    with pytest.raises(InvalidArgumentError, match=r"^guidance_scale must be a finite number in \[-1000, 1000\]"):
        _sample(model, diffusion, d["inputs"]["text_embeddings"], guidance=guidance)


@pytest.mark.parametrize("override, message", [
    (dict(sigma_min=1.0, sigma_max=0.5), "sigma_min must be below sigma_max"),
    (dict(sigma_min=float("nan")), "sigma_min must be a finite number"),
    (dict(sigma_max=float("inf")), "sigma_max must be a finite number"),
    (dict(sigma_min=-1.0), "sigma_min must be a finite number in (0, 10000]"),
    (dict(steps=10**9), "karras_steps must be an integer in [2, 10000]"),
    (dict(s_churn=float("nan")), "s_churn must be a finite number >= 0"),
])
def test_out_of_range_sampler_numbers_are_refused_by_name(model, diffusion, d, override, message):
    with pytest.raises(InvalidArgumentError) as info:
        _sample(model, diffusion, d["inputs"]["text_embeddings"], **override)
    assert message in str(info.value)


def test_texts_must_be_strings():
    from shap_e.models.download import load_config, load_model

    model = load_model("text-small")
    diffusion = diffusion_from_config(load_config("diffusion-small"))
    with pytest.raises(InvalidArgumentError, match=r"model_kwargs\['texts'\] must be a list of strings.*None"):
        _call(1, model, diffusion, dict(texts=[None]), 3.0)


def test_a_small_prior_refuses_the_official_diffusion_and_samples_with_its_own():
    """The README's example switched to text-small but still on load_config("diffusion") used to
    return a 22-vertex mesh without a word; now it is an error naming the right config."""
    from shap_e.models.download import load_config, load_model

    model = load_model("text-small")
    texts = dict(texts=["a red cube"])
    with pytest.raises(InvalidArgumentError, match=r"trained with the 'diffusion-small' diffusion \(cosine schedule, "
                                                   r"v prediction\).*load_config\('diffusion-small'\)"):
        _call(1, model, diffusion_from_config(load_config("diffusion")), texts, 3.0)
    latents = _call(1, model, diffusion_from_config(load_config("diffusion-small")), texts, 3.0)
    assert latents.shape == (1, model.d_latent) and torch.isfinite(latents).all()


class _Exploding(torch.nn.Module):
    """A prior whose prediction overflows: what a broken checkpoint or dtype would give."""

    d_latent = 8

    def forward(self, x, t, **kwargs):
        return torch.full((x.shape[0], 2 * self.d_latent), float("inf"))


def test_a_non_finite_sample_is_an_error_not_a_result(diffusion):
    with pytest.raises(NonFiniteError, match="the sampled latents holds 8 NaN or infinite values of 8; lower "
                                             "guidance_scale"):
        _call(1, _Exploding(), diffusion, {}, 1.0, clip_denoised=False)
