"""Named sampling presets and their precedence rules in `sample_latents`."""
import dataclasses

import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.presets import FAST_STEPS, PRESETS, SamplingPreset, get_preset, resolve_preset
from shap_e.diffusion.sample import sample_latents


class CountingModel(torch.nn.Module):
    """Cheap conditional model (output linear in x) that counts its calls."""

    conditioning = "text"
    d_latent = 4

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, t, embeddings=None):
        self.calls += 1
        return torch.cat([0.5 * x + embeddings[:, :4], torch.zeros_like(x)], dim=1)


@pytest.fixture(scope="module")
def diffusion(golden):
    return diffusion_from_config(golden("d")["config"]["diffusion"])


OFFICIAL_KARRAS = dict(clip_denoised=True, use_fp16=False, use_karras=True, sigma_min=1e-3, sigma_max=160.0,
                      s_churn=0.0)


def _sample(diffusion, **kwargs):
    model = CountingModel()
    out = sample_latents(batch_size=2, model=model, diffusion=diffusion,
                         model_kwargs=dict(embeddings=torch.ones(2, 8)), guidance_scale=3.0,
                         generator=torch.Generator().manual_seed(0), **kwargs)
    return out, model.calls


def test_default_preset_is_the_official_64_step_heun_setting():
    preset = get_preset("default")
    assert (preset.sampler, preset.karras_steps, preset.sigma_min, preset.sigma_max,
            preset.s_churn, preset.use_karras) == ("heun", 64, 1e-3, 160.0, 0.0, True)
    assert preset.model_evaluations == 127


def test_fast_preset_is_dpmpp_2m_with_one_evaluation_per_step():
    preset = get_preset("fast")
    assert preset.sampler == "dpmpp_2m" and preset.karras_steps == FAST_STEPS
    assert preset.model_evaluations == FAST_STEPS
    assert (preset.sigma_min, preset.sigma_max) == (1e-3, 160.0)


def test_presets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PRESETS["fast"].karras_steps = 2


def test_unknown_preset_name_lists_the_valid_ones(diffusion):
    with pytest.raises(ValueError, match=r"preset='turbo' is unknown; use one of \['default', 'fast'\]"):
        _sample(diffusion, preset="turbo")


def test_explicit_arguments_win_over_the_preset():
    resolved = resolve_preset("fast", karras_steps=24, s_churn=None)
    assert (resolved.name, resolved.sampler, resolved.karras_steps) == ("fast", "dpmpp_2m", 24)
    assert resolve_preset(None, sampler="euler").karras_steps == 64


def test_fast_preset_equals_the_explicit_dpmpp_2m_call(diffusion):
    by_name, calls = _sample(diffusion, preset="fast")
    explicit, _ = _sample(diffusion, **OFFICIAL_KARRAS, karras_steps=FAST_STEPS,
                          sampler="dpmpp_2m")
    assert calls == FAST_STEPS and torch.equal(by_name, explicit)


def test_without_preset_or_sampler_arguments_the_default_preset_runs(diffusion):
    implicit, calls = _sample(diffusion)
    official, _ = _sample(diffusion, **OFFICIAL_KARRAS, karras_steps=64)
    assert calls == 127 and torch.equal(implicit, official)


def test_explicit_steps_override_the_preset_steps(diffusion):
    _, calls = _sample(diffusion, **OFFICIAL_KARRAS, karras_steps=6, preset="fast")
    assert calls == 6


def test_a_sampling_preset_object_samples_like_its_name_and_custom_ones_run(diffusion):
    by_name, _ = _sample(diffusion, preset="fast")
    by_object, _ = _sample(diffusion, preset=get_preset("fast"))
    assert torch.equal(by_name, by_object)
    custom = SamplingPreset("mine", sampler="dpm2", karras_steps=5)
    _, calls = _sample(diffusion, preset=custom)
    assert calls == custom.model_evaluations == 10


def test_a_preset_of_another_type_or_with_an_unknown_sampler_is_refused(diffusion):
    with pytest.raises(ValueError, match="preset must be a SamplingPreset"):
        _sample(diffusion, preset=3)
    with pytest.raises(ValueError, match="sampler='lms' is unknown"):
        _sample(diffusion, preset=SamplingPreset("bad", sampler="lms", karras_steps=4))
