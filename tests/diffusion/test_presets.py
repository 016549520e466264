"""Named sampling presets and their precedence rules in `sample_latents`."""
import dataclasses

import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.presets import FAST_STEPS, PRESETS, get_preset, resolve_preset
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


def _sample(diffusion, *args, **kwargs):
    model = CountingModel()
    out = sample_latents(2, model, diffusion, dict(embeddings=torch.ones(2, 8)), 3.0, *args,
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
    explicit, _ = _sample(diffusion, True, False, True, FAST_STEPS, 1e-3, 160.0, 0.0,
                          sampler="dpmpp_2m")
    assert calls == FAST_STEPS and torch.equal(by_name, explicit)


def test_without_preset_or_sampler_arguments_the_default_preset_runs(diffusion):
    implicit, calls = _sample(diffusion)
    official, _ = _sample(diffusion, True, False, True, 64, 1e-3, 160.0, 0.0)
    assert calls == 127 and torch.equal(implicit, official)


def test_positional_steps_override_the_preset_steps(diffusion):
    _, calls = _sample(diffusion, True, False, True, 6, 1e-3, 160.0, 0.0, preset="fast")
    assert calls == 6
