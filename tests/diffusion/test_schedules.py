"""Beta schedules, respacing and the loss helpers under their official names and signatures."""
import math

import numpy as np
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import (
    SpacedDiffusion, approx_standard_normal_cdf, betas_for_alpha_bar, diffusion_from_config,
    discretized_gaussian_log_likelihood, get_beta_schedule, get_named_beta_schedule, mean_flat, normal_kl,
    space_timesteps,
)


def _alpha_bar(betas):
    return np.cumprod(1 - betas)


def test_parabola_schedules_follow_their_alpha_bar_with_default_power_two():
    s = np.arange(1, 10) / 10
    np.testing.assert_allclose(_alpha_bar(get_named_beta_schedule("inv_parabola", 10))[:-1], 1 - s ** 2,
                               rtol=1e-12)
    np.testing.assert_allclose(_alpha_bar(get_named_beta_schedule("inv_parabola", 10, power=3.0))[:-1],
                               1 - s ** 3, rtol=1e-12)
    np.testing.assert_allclose(_alpha_bar(get_named_beta_schedule("translated_parabola", 10))[:-1],
                               (1 - s) ** 2, rtol=1e-12)
    assert get_named_beta_schedule("inv_parabola", 10)[-1] == 0.999  # the last beta clips at max_beta


def test_linear_schedule_is_the_deprecated_get_beta_schedule_scaled_to_t():
    betas = get_beta_schedule("linear", beta_start=0.1, beta_end=0.3, num_diffusion_timesteps=3)
    assert betas.tolist() == pytest.approx([0.1, 0.2, 0.3])
    np.testing.assert_allclose(get_named_beta_schedule("linear", 500), np.linspace(2e-4, 0.04, 500), rtol=1e-12)
    with pytest.raises(ValueError, match="only 'linear'"):
        get_beta_schedule("cosine", beta_start=0.1, beta_end=0.3, num_diffusion_timesteps=3)


def test_betas_for_alpha_bar_discretises_and_caps():
    betas = betas_for_alpha_bar(4, lambda s: 1 - s, max_beta=0.5)
    assert betas.tolist() == pytest.approx([0.25, 1 / 3, 0.5, 0.5])


def test_named_schedule_arguments_are_checked():
    with pytest.raises(ValueError, match="schedule='quadratic' is unknown"):
        get_named_beta_schedule("quadratic", 10)
    with pytest.raises(ValueError, match=r"\['power'\] are not used by schedule 'exp'"):
        get_named_beta_schedule("exp", 10, power=2.0)
    with pytest.raises(ValueError, match="num_diffusion_timesteps"):
        get_named_beta_schedule("exp", 0)


def test_space_timesteps_sections_ddim_and_exact():
    assert space_timesteps(300, [10, 15, 20]) == space_timesteps(300, "10,15,20")
    assert len(space_timesteps(300, [10, 15, 20])) == 45
    assert space_timesteps(100, "ddim25") == set(range(0, 100, 4))
    assert space_timesteps(100, "exact0,50,99") == {0, 50, 99}
    with pytest.raises(ValueError, match=r"\[100\] outside"):
        space_timesteps(100, "exact0,100")
    with pytest.raises(ValueError, match="ddim33"):
        space_timesteps(100, "ddim33")


def test_config_respacing_builds_a_spaced_diffusion_and_reads_yaml_paths(tmp_path):
    config = {"schedule": "exp", "timesteps": 64, "mean_type": "x_start", "respacing": "ddim16"}
    path = tmp_path / "diffusion.yaml"
    path.write_text("schedule: exp\ntimesteps: 64\nmean_type: x_start\nrespacing: ddim16\n")
    for source in (config, str(path)):
        spaced = diffusion_from_config(source)
        assert isinstance(spaced, SpacedDiffusion) and spaced.use_timesteps == set(range(0, 64, 4))
        assert spaced.model_mean_type == "x_start" and spaced.model_var_type == "learned_range"
        assert spaced.loss_type == "mse" and not spaced.discretized_t0


def test_mean_flat_and_normal_kl():
    x = torch.arange(12.0).reshape(2, 3, 2)
    assert mean_flat(x).tolist() == [2.5, 8.5]
    kl = normal_kl(torch.tensor([1.0]), torch.tensor([math.log(4.0)]), 0.0, 0.0)
    assert kl.item() == pytest.approx(0.5 * (-1 - math.log(4) + 4 + 1))  # KL(N(1, 4) || N(0, 1))
    with pytest.raises(TypeError, match="tensor"):
        normal_kl(0.0, 0.0, 0.0, 0.0)


def test_discretized_log_likelihood_bins_sum_to_one():
    bins = torch.linspace(-1, 1, 256)
    means, log_scales = torch.full((256,), 0.1), torch.full((256,), math.log(0.3))
    log_p = discretized_gaussian_log_likelihood(bins, means=means, log_scales=log_scales)
    assert log_p.exp().sum().item() == pytest.approx(1.0, abs=1e-4)
    assert approx_standard_normal_cdf(torch.tensor([0.0, 1.0])).tolist() == pytest.approx([0.5, 0.8413], abs=1e-3)
    with pytest.raises(TypeError):
        discretized_gaussian_log_likelihood(bins, means, log_scales)  # keyword-only, as the official
    with pytest.raises(ValueError, match="one shape"):
        discretized_gaussian_log_likelihood(bins, means=means[:3], log_scales=log_scales)
