"""`sample_latents` extras (generators, samplers, SDEdit, dtype, DDPM guidance) and validation."""
import warnings

import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.karras import karras_sigmas
from shap_e.diffusion.sample import sample_latents


@pytest.fixture(scope="module")
def diffusion(d):
    return diffusion_from_config(d["config"]["diffusion"])


@pytest.fixture(scope="module")
def emb4(d):
    emb = d["inputs"]["text_embeddings"]
    return torch.cat([emb, emb.flip(0)])


def _sample(model, diffusion, emb, steps=8, guidance=3.0, **kwargs):
    return sample_latents(
        batch_size=len(emb), model=model, diffusion=diffusion, model_kwargs=dict(embeddings=emb),
        guidance_scale=guidance, clip_denoised=True, use_fp16=False, use_karras=True, karras_steps=steps,
        sigma_min=1e-3, sigma_max=160, s_churn=0.0, **kwargs,
    )


def _seeds(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_guidance_max_sigma_above_the_schedule_is_plain_guidance_and_below_it_changes_the_sample(
        model, diffusion, emb4):
    plain = _sample(model, diffusion, emb4, generator=_seeds(0, 1, 2, 3))
    everywhere = _sample(model, diffusion, emb4, generator=_seeds(0, 1, 2, 3), guidance_max_sigma=160.0)
    assert torch.equal(everywhere, plain)
    limited = _sample(model, diffusion, emb4, generator=_seeds(0, 1, 2, 3), guidance_max_sigma=5.0)
    unguided_start = _sample(model, diffusion, emb4, generator=_seeds(0, 1, 2, 3), guidance=1.0)
    assert not torch.equal(limited, plain) and not torch.equal(limited, unguided_start)


def test_same_generator_seed_gives_identical_latents(model, diffusion, emb4):
    first = _sample(model, diffusion, emb4[:2], generator=torch.Generator().manual_seed(7))
    second = _sample(model, diffusion, emb4[:2], generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, second)


def test_per_sample_generators_make_each_row_independent_of_the_batch(model, diffusion, emb4):
    batch = _sample(model, diffusion, emb4, generator=_seeds(0, 1, 2, 3))
    for i in range(4):
        alone = _sample(model, diffusion, emb4[i : i + 1], generator=_seeds(i))
        # Only batch-size-dependent matmul rounding differs (measured <= 6e-5).
        torch.testing.assert_close(alone[0], batch[i], atol=2e-4, rtol=0)


@pytest.mark.parametrize("sampler", ["euler", "euler_ancestral", "dpmpp_2m"])
def test_every_sampler_runs_through_sample_latents(model, diffusion, emb4, sampler):
    out = _sample(model, diffusion, emb4[:2], sampler=sampler, generator=torch.Generator())
    assert out.shape == (2, 128) and torch.isfinite(out).all()


def test_dpmpp_2m_converges_toward_a_128_step_heun_reference(model, diffusion, emb4):
    reference = _sample(model, diffusion, emb4[:2], steps=128, generator=_seeds(0, 1))
    errors = [
        (_sample(model, diffusion, emb4[:2], steps=n, sampler="dpmpp_2m", generator=_seeds(0, 1))
         - reference).abs().max().item()
        for n in (8, 16, 32, 64)
    ]
    assert all(b < a for a, b in zip(errors, errors[1:])), errors


class CountingModel(torch.nn.Module):
    """Zero-output conditional model that records every input it sees."""

    conditioning = "text"
    d_latent = 4

    def __init__(self):
        super().__init__()
        self.inputs = []

    def forward(self, x, t, embeddings=None):
        self.inputs.append(x.clone())
        return torch.zeros(len(x), 8)


def test_sdedit_starts_from_noised_init_latent_at_the_strength_index(diffusion):
    model = CountingModel()
    init = torch.full((2, 4), 0.5)
    out = sample_latents(
        batch_size=2, model=model, diffusion=diffusion, model_kwargs=dict(embeddings=torch.ones(2, 3)),
        guidance_scale=3.0, clip_denoised=True, use_fp16=False, use_karras=True, karras_steps=8,
        sigma_min=1e-3, sigma_max=160, s_churn=0.0, generator=torch.Generator().manual_seed(3),
        init_latent=init, strength=0.5,
    )
    sigma = karras_sigmas(8, 1e-3, 160)[4]
    noise = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    expected_x = (init + noise * sigma) / (sigma**2 + 1) ** 0.5
    assert len(model.inputs) == 2 * 4 - 1  # Heun over the last 4 of 8 steps, one batched call each
    torch.testing.assert_close(model.inputs[0][:2], expected_x)
    assert out.shape == (2, 4)


def test_callback_sees_every_step_with_the_step_count_and_an_sdedit_start_runs_fewer_steps(diffusion):
    seen = []
    _sample(CountingModel(), diffusion, torch.ones(2, 3), generator=_seeds(0, 1), callback=seen.append)
    assert [(info["i"], info["steps"]) for info in seen] == [(i, 8) for i in range(8)]
    assert seen[0]["x"].shape == seen[0]["denoised"].shape == (2, 4)
    seen.clear()
    _sample(CountingModel(), diffusion, torch.ones(2, 3), init_latent=torch.zeros(2, 4), strength=0.5,
            callback=seen.append)
    assert [(info["i"], info["steps"]) for info in seen] == [(i, 4) for i in range(4)]


def test_an_exception_raised_by_the_callback_stops_sampling_between_steps(diffusion):
    class Stop(Exception):
        pass

    def stop_after_third(info):
        if info["i"] == 2:
            raise Stop

    model = CountingModel()
    with pytest.raises(Stop):
        _sample(model, diffusion, torch.ones(2, 3), sampler="euler", callback=stop_after_third)
    assert len(model.inputs) == 3  # one Euler evaluation per step, none after the callback raised


def test_use_fp16_on_cpu_warns_and_runs_bfloat16_with_float32_output(model, diffusion, emb4, monkeypatch):
    monkeypatch.setattr("shap_e.diffusion.sample.native_bf16", lambda device: True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = sample_latents(
            batch_size=2, model=model, diffusion=diffusion, model_kwargs=dict(embeddings=emb4[:2]),
            guidance_scale=3.0, clip_denoised=True, use_fp16=True, use_karras=True, karras_steps=4,
            sigma_min=1e-3, sigma_max=160, s_churn=0.0, generator=torch.Generator().manual_seed(0),
        )
    assert any("bfloat16" in str(w.message) for w in caught)
    reference = _sample(model, diffusion, emb4[:2], steps=4,
                        generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32
    assert 0 < (out - reference).abs().max() < 3.0


def test_use_fp16_on_a_cpu_without_native_bfloat16_runs_float32_exactly(model, diffusion, emb4, monkeypatch):
    monkeypatch.setattr("shap_e.diffusion.sample.native_bf16", lambda device: False)
    with pytest.warns(UserWarning, match="float32"):
        out = sample_latents(
            batch_size=2, model=model, diffusion=diffusion, model_kwargs=dict(embeddings=emb4[:2]),
            guidance_scale=3.0, clip_denoised=True, use_fp16=True, use_karras=True, karras_steps=4,
            sigma_min=1e-3, sigma_max=160, s_churn=0.0, generator=torch.Generator().manual_seed(0),
        )
    reference = _sample(model, diffusion, emb4[:2], steps=4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, reference)


def test_ddpm_path_guides_with_batch_rows_unless_legacy(model, d):
    ddpm = diffusion_from_config(d["config"]["ddpm_diffusion"])
    emb = d["inputs"]["text_embeddings"]
    args = dict(batch_size=2, model=model, diffusion=ddpm, model_kwargs=dict(embeddings=emb), guidance_scale=3.0,
                clip_denoised=True, use_fp16=False, use_karras=False, karras_steps=0, sigma_min=1e-3,
                sigma_max=160, s_churn=0.0)
    assert sample_latents(**args, generator=_seeds(0, 1)).shape == (2, 128)
    assert sample_latents(**args, legacy_guidance=True).shape == (4, 128)


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(karras_steps=1), "karras_steps"),
        (dict(sampler="lms"), "dpmpp_2m"),
        (dict(model_kwargs={}), "model_kwargs"),
        (dict(model_kwargs=dict(embeddings=torch.zeros(3, 768))), "batch_size is 2"),
        (dict(sampler="dpmpp_2m", s_churn=1.0), "s_churn"),
        (dict(strength=0.5), "init_latent"),
        (dict(init_latent=torch.zeros(2, 128), strength=1.5), "strength"),
        (dict(init_latent=torch.zeros(2, 5), strength=0.5), "init_latent must be"),
        (dict(generator=[torch.Generator()]), "one generator per sample"),
        (dict(dtype=torch.float64), "dtype"),
        (dict(guidance_max_sigma=0.0), "guidance_max_sigma must be a positive number"),
        (dict(guidance_max_sigma="5"), "guidance_max_sigma must be a positive number"),
        (dict(guidance_max_sigma=5.0, use_karras=False), "guidance_max_sigma needs use_karras=True"),
        (dict(callback=print, use_karras=False), "callback needs use_karras=True"),
    ],
)
def test_invalid_arguments_raise_before_any_model_call(diffusion, emb4, change, match):
    model = CountingModel()
    model.d_latent = 128
    args = dict(batch_size=2, model=model, diffusion=diffusion,
                model_kwargs=dict(embeddings=emb4[:2]), guidance_scale=3.0, clip_denoised=True,
                use_fp16=False, use_karras=True, karras_steps=8, sigma_min=1e-3, sigma_max=160,
                s_churn=0.0)
    with pytest.raises(ValueError, match=match):
        sample_latents(**{**args, **change})
    assert model.inputs == []


def test_guidance_with_an_unconditional_model_is_rejected(diffusion):
    class Unconditional(torch.nn.Module):
        d_latent = 4

        def forward(self, x, t):
            raise AssertionError("must not be called")

    with pytest.raises(ValueError, match="conditional model"):
        sample_latents(
            batch_size=1, model=Unconditional(), diffusion=diffusion,
            model_kwargs=dict(embeddings=torch.ones(1, 3)), guidance_scale=3.0, clip_denoised=True,
            use_fp16=False, use_karras=True, karras_steps=4, sigma_min=1e-3, sigma_max=160, s_churn=0.0,
        )


def test_sdedit_init_latent_is_given_in_data_space_when_the_diffusion_scales_channels(d):
    scaled = diffusion_from_config({**d["config"]["diffusion"], "channel_scales": [2.0] * 4,
                                    "channel_biases": [0.5] * 4})
    model = CountingModel()
    init = torch.full((1, 4), 0.25)
    sample_latents(
        batch_size=1, model=model, diffusion=scaled, model_kwargs=dict(embeddings=torch.ones(1, 3)),
        guidance_scale=1.0, clip_denoised=True, use_fp16=False, use_karras=True, karras_steps=8,
        sigma_min=1e-3, sigma_max=160, s_churn=0.0, generator=torch.Generator().manual_seed(3),
        init_latent=init, strength=0.5,
    )
    sigma = karras_sigmas(8, 1e-3, 160)[4]
    noise = torch.randn(1, 4, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(model.inputs[0], (init * 2.0 + 0.5 + noise * sigma) / (sigma**2 + 1) ** 0.5)
