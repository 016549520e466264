"""Karras sigma grid, the sigma->t denoiser adapter (golden c) and sampler properties."""
import numpy as np
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.karras import (
    SAMPLERS, KarrasDenoiser, guided_denoiser, karras_sigmas, sample_heun, sigma_to_t,
)


@pytest.fixture(scope="module")
def c(golden):
    return golden("c")


@pytest.fixture(scope="module")
def diffusion(c):
    return diffusion_from_config(c["config"]["diffusion"])


@pytest.mark.parametrize("steps", [8, 64])
def test_karras_sigmas_are_bit_identical_to_golden(c, steps):
    expected = c["outputs"]["karras"][f"steps{steps}"]["sigmas"]
    sigmas = karras_sigmas(steps, 1e-3, 160)
    assert sigmas.dtype == torch.float32 and torch.equal(sigmas, expected)


@pytest.mark.parametrize("steps", [8, 64])
def test_sigma_to_t_interpolates_and_truncates_like_golden(c, diffusion, steps):
    expected = c["outputs"]["karras"][f"steps{steps}"]
    sigmas = expected["sigmas"]
    t_float = [sigma_to_t(s, diffusion.alphas_cumprod) for s in sigmas.numpy()]
    np.testing.assert_allclose(t_float, expected["t_float"].numpy(), rtol=1e-12, atol=1e-9)
    denoiser = KarrasDenoiser(None, diffusion)
    assert torch.equal(denoiser.timesteps(sigmas), expected["t_long"])


def test_karras_denoiser_matches_golden(c, diffusion):
    inp, expected = c["inputs"]["karras_denoise"], c["outputs"]["karras_denoise"]
    seen = {}

    def model(x, t, **kwargs):
        seen.update(x=x, t=t)
        return inp["model_output"]

    denoised = KarrasDenoiser(model, diffusion, clip_denoised=True)(inp["x_t"], inp["sigmas"])
    torch.testing.assert_close(denoised, expected["denoised"], atol=1e-6, rtol=0)
    torch.testing.assert_close(seen["x"], expected["model_saw_x"], atol=1e-6, rtol=0)
    assert torch.equal(seen["t"], expected["model_saw_t"])


def test_guided_denoiser_makes_one_batched_call_and_guides_every_channel():
    calls = []

    def denoiser(x, sigma):
        calls.append(len(x))
        return torch.cat([torch.full((2, 3), 2.0), torch.full((2, 3), 1.0)])

    out = guided_denoiser(denoiser, 3.0)(torch.zeros(2, 3), torch.ones(2))
    assert calls == [4]
    assert torch.equal(out, torch.full((2, 3), 4.0))  # 1 + 3 * (2 - 1)


def test_guided_denoiser_with_max_sigma_guides_only_the_rows_at_or_below_it():
    def denoiser(x, sigma):
        return torch.cat([torch.full((3, 2), 2.0), torch.full((3, 2), 1.0)])

    out = guided_denoiser(denoiser, 3.0, max_sigma=5.0)(torch.zeros(3, 2), torch.tensor([10.0, 5.0, 0.5]))
    assert torch.equal(out, torch.tensor([[2.0, 2.0], [4.0, 4.0], [4.0, 4.0]]))  # above: the conditional alone


def _gaussian_denoiser(mu, s):
    """Exact x̂₀ for data ~ N(mu, s²): the probability-flow ODE then has a closed form."""

    def denoiser(x, sigma):
        sigma = sigma[:, None]
        return mu + s**2 / (s**2 + sigma**2) * (x - mu)

    return denoiser


def _exact_endpoint(x_t, mu, s, sigma_max):
    return mu + (x_t - mu) * s / (s**2 + sigma_max**2) ** 0.5


@pytest.mark.parametrize("name,order", [("heun", 2), ("dpm2", 2), ("euler", 1), ("dpmpp_2m", 2)])
def test_deterministic_samplers_converge_to_the_exact_ode_solution_at_their_order(name, order):
    mu, s = torch.tensor([0.3, -0.5]), torch.tensor([0.5, 0.2])
    x = torch.randn(3, 2, generator=torch.Generator().manual_seed(0)) * 80.0
    exact = _exact_endpoint(x, mu, s, 80.0)
    errors = []
    for steps in (8, 16, 32, 64):
        sigmas = karras_sigmas(steps, 2e-3, 80.0).double()
        out = SAMPLERS[name](_gaussian_denoiser(mu.double(), s.double()), x.double(), sigmas)
        errors.append((out - exact.double()).abs().max().item())
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    # Halving the step should divide the error by ~2**order (measured 2.0 / 4.3 / 4.5).
    assert errors[-2] / errors[-1] > 0.9 * 2**order, errors


def test_euler_ancestral_is_seeded_by_its_generator():
    mu, s = torch.zeros(4), torch.ones(4)
    sigmas = karras_sigmas(10, 1e-2, 20.0)
    x = torch.ones(2, 4) * 20.0
    runs = [
        SAMPLERS["euler_ancestral"](_gaussian_denoiser(mu, s), x, sigmas,
                                    generator=torch.Generator().manual_seed(seed))
        for seed in (5, 5, 6)
    ]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_heun_draws_one_noise_per_step_without_churn():
    torch.manual_seed(0)
    sample_heun(lambda x, sigma: x * 0, torch.zeros(1, 3), karras_sigmas(5, 1e-3, 10.0))
    after = torch.randn(1)
    torch.manual_seed(0)
    for _ in range(5):
        torch.randn(1, 3)
    assert torch.equal(after, torch.randn(1))


def test_callback_reports_every_step_with_sigma_hat():
    infos = []
    sample_heun(lambda x, sigma: x * 0, torch.zeros(1, 3), karras_sigmas(4, 1e-3, 10.0),
                callback=infos.append, s_churn=1.0)
    assert [info["i"] for info in infos] == [0, 1, 2, 3]
    assert all(info["sigma_hat"] > info["sigma"] for info in infos)
