"""The official `shap_e.diffusion.k_diffusion` adapter: golden runs of `karras_sample_progressive`
(file d), the Gaussian -> Karras denoiser (file c), the generator samplers' step dicts and the EDM
`KarrasDenoiser` against hand computations."""
import math

import pytest
import torch

from shap_e.diffusion import karras
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.k_diffusion import (
    GaussianToKarrasDenoiser, KarrasDenoiser, append_dims, append_zero, get_ancestral_step, get_sigmas_karras,
    karras_sample, karras_sample_progressive, sample_dpm, sample_euler_ancestral, sample_heun, to_d,
)

RUNS = ["d1_karras8_guid3_churn0", "d2_karras8_guid3_churn3", "d3_karras8_guid1_churn0", "d5_grid_karras6_guid3"]
STEP_KEYS = ["i", "pred_xstart", "sigma", "sigma_hat", "x"]


class ReplayModel:
    """Returns the recorded outputs of golden d's model calls, checking the timesteps it is shown."""

    def __init__(self, calls):
        self.calls, self.index = calls, 0

    def __call__(self, x, t, **kwargs):
        call = self.calls[self.index]
        self.index += 1
        assert torch.equal(t, call["t"])
        return call["out"]


def _progressive(d, name, model):
    run = d["outputs"][name]
    args = run["args"]
    emb = d["inputs"]["grid_embeddings" if name.startswith("d5") else "text_embeddings"]
    guided = args["guidance_scale"] not in (0.0, 1.0)
    torch.manual_seed(args["seed"])
    return karras_sample_progressive(
        diffusion_from_config(d["config"]["diffusion"]), model, (2, 128), args["karras_steps"],
        clip_denoised=True, model_kwargs={"embeddings": torch.cat([emb, torch.zeros_like(emb)]) if guided else emb},
        device="cpu", sigma_min=args["sigma_min"], sigma_max=args["sigma_max"], s_churn=args["s_churn"],
        guidance_scale=args["guidance_scale"],
    )


@pytest.mark.parametrize("name", RUNS)
def test_karras_sample_progressive_yields_the_official_step_dicts(d, name):
    run = d["outputs"][name]
    model = ReplayModel(run["model_calls"])
    steps = list(_progressive(d, name, model))
    assert model.index == len(run["model_calls"])
    trace = run["karras_steps_trace"]
    assert [sorted(s) for s in steps] == [STEP_KEYS] * (len(trace) - 1) + [["pred_xstart", "x"]]
    for got, expected in zip(steps, trace):
        for key, value in expected.items():
            if key == "i":
                assert got[key] == value
            else:
                # Measured bit-identical on torch 2.13 CPU; the churned run may drift by ~2e-5 on other CPUs.
                torch.testing.assert_close(got[key], value, atol=1e-4, rtol=0)


def test_karras_sample_is_the_last_progressive_x_and_matches_golden_with_the_real_model(d, model):
    name = "d1_karras8_guid3_churn0"
    last = list(_progressive(d, name, model))[-1]["x"]
    args = d["outputs"][name]["args"]
    emb = d["inputs"]["text_embeddings"]
    torch.manual_seed(args["seed"])
    sample = karras_sample(diffusion_from_config(d["config"]["diffusion"]), model, (2, 128), 8, device="cpu",
                           model_kwargs={"embeddings": torch.cat([emb, torch.zeros_like(emb)])}, sigma_min=1e-3,
                           sigma_max=160, guidance_scale=3.0)
    assert torch.equal(sample, last)
    torch.testing.assert_close(sample, d["outputs"][name]["samples"], atol=5e-4, rtol=0)


def test_gaussian_to_karras_denoiser_matches_golden(golden):
    c = golden("c")
    diffusion = diffusion_from_config(c["config"]["diffusion"])
    inp, expected = c["inputs"]["karras_denoise"], c["outputs"]["karras_denoise"]
    seen = {}

    def model(x, t, **kwargs):
        seen.update(x=x, t=t)
        return inp["model_output"]

    adapter = GaussianToKarrasDenoiser(model, diffusion)
    none, denoised = adapter.denoise(inp["x_t"], inp["sigmas"], clip_denoised=True)
    assert none is None and torch.equal(seen["t"], expected["model_saw_t"])
    torch.testing.assert_close(denoised, expected["denoised"], atol=1e-6, rtol=0)
    steps8 = c["outputs"]["karras"]["steps8"]
    t_float = [adapter.sigma_to_t(s) for s in steps8["sigmas"].numpy()]
    assert t_float == pytest.approx(steps8["t_float"].tolist(), rel=1e-12, abs=1e-9)
    assert torch.equal(get_sigmas_karras(8, 1e-3, 160), steps8["sigmas"])


def test_small_helpers_compute_what_they_say():
    assert append_dims(torch.ones(3), 3).shape == (3, 1, 1)
    with pytest.raises(ValueError, match="target_dims=1"):
        append_dims(torch.ones(2, 2), 1)
    assert append_zero(torch.tensor([3.0, 1.0])).tolist() == [3.0, 1.0, 0.0]
    x, denoised = torch.tensor([[4.0, 2.0], [1.0, 1.0]]), torch.zeros(2, 2)
    assert to_d(x, torch.tensor([2.0, 0.5]), denoised).tolist() == [[2.0, 1.0], [2.0, 2.0]]
    down, up = get_ancestral_step(torch.tensor(2.0), torch.tensor(1.0))
    assert up.item() == pytest.approx(math.sqrt(1 * (4 - 1) / 4)) and down**2 + up**2 == pytest.approx(1.0)
    assert get_ancestral_step(2.0, 0.0) == (0.0, 0.0)


def _gaussian_denoiser(x, sigma):
    """Exact x̂₀ for data ~ N(0.3, 0.5²) in every coordinate."""
    return 0.3 + 0.25 / (0.25 + sigma[:, None] ** 2) * (x - 0.3)


@pytest.mark.parametrize("sampler,key", [(sample_heun, "pred_xstart"), (sample_dpm, "denoised"),
                                         (sample_euler_ancestral, "pred_xstart")])
def test_samplers_are_generators_of_the_official_step_dicts(sampler, key):
    sigmas = get_sigmas_karras(6, 0.01, 10.0)
    torch.manual_seed(0)
    steps = list(sampler(_gaussian_denoiser, torch.randn(2, 3) * 10, sigmas))
    assert [s["i"] for s in steps[:-1]] == list(range(6)) and sorted(steps[-1]) == ["pred_xstart", "x"]
    assert all(sorted(s) == sorted(["x", "i", "sigma", "sigma_hat", key]) for s in steps[:-1])
    assert torch.equal(steps[2]["sigma"], sigmas[2])
    assert (steps[-1]["x"] - 0.3).abs().max() < 1.5  # lands in the data distribution's range


def test_generator_samplers_end_at_the_typed_samplers_result():
    sigmas = get_sigmas_karras(5, 0.01, 10.0)
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)) * 10
    for official, typed in [(sample_heun, karras.sample_heun), (sample_dpm, karras.sample_dpm2)]:
        torch.manual_seed(4)
        last = list(official(_gaussian_denoiser, x, sigmas, s_churn=2.0))[-1]["x"]
        torch.manual_seed(4)
        assert torch.equal(last, typed(_gaussian_denoiser, x, sigmas, s_churn=2.0))


def test_ancestral_draws_one_noise_per_step_also_the_last():
    torch.manual_seed(0)
    diffusion = diffusion_from_config({"schedule": "exp", "timesteps": 64, "mean_type": "x_start"})
    list(karras_sample_progressive(diffusion, lambda x, t: torch.zeros(len(x), 6), (1, 3), 4, device="cpu",
                                   sampler="ancestral"))
    after = torch.randn(1)
    torch.manual_seed(0)
    for _ in range(1 + 4):
        torch.randn(1, 3)
    assert torch.equal(after, torch.randn(1))


def test_karras_denoiser_preconditions_as_edm():
    edm = KarrasDenoiser(sigma_data=0.5)
    sigma = torch.tensor([0.0, 0.5, 2.0])
    c_skip, c_out, c_in = edm.get_scalings(sigma)
    assert c_skip.tolist() == pytest.approx([1.0, 0.5, 0.25 / 4.25])
    assert c_out.tolist() == pytest.approx([0.0, 0.25 / math.sqrt(0.5), 1.0 / math.sqrt(4.25)])
    assert c_in.tolist() == pytest.approx([2.0, 1 / math.sqrt(0.5), 1 / math.sqrt(4.25)])
    assert torch.equal(edm.get_sigmas(sigma), sigma) and edm.get_snr(torch.tensor([2.0])).item() == 0.25
    seen = {}

    def network(x, t):
        seen.update(x=x, t=t)
        return torch.ones_like(x)

    x_t = torch.full((3, 2), 4.0)
    output, denoised = edm.denoise(network, x_t, sigma)
    torch.testing.assert_close(seen["x"], c_in[:, None] * x_t)
    torch.testing.assert_close(seen["t"][1:], 250 * torch.log(sigma[1:]))
    torch.testing.assert_close(denoised, c_out[:, None] + c_skip[:, None] * x_t)


def test_karras_denoiser_training_losses_are_zero_for_the_ideal_network():
    edm = KarrasDenoiser()
    x0, noise, sigmas = torch.tensor([[0.2, -0.4]]), torch.tensor([[1.0, 0.5]]), torch.tensor([0.7])
    c_skip, c_out, c_in = edm.get_scalings(sigmas)
    x_t = x0 + noise * 0.7

    def ideal(x, t):  # F = (x0 − c_skip x_t) / c_out recovers x0 exactly
        return (x0 - c_skip * (x / c_in)) / c_out

    terms = edm.training_losses(ideal, x0, sigmas, noise=noise)
    assert sorted(terms) == ["loss", "mse", "xs_mse"]
    assert terms["mse"].item() < 1e-10 and terms["xs_mse"].item() < 1e-10
    off = edm.training_losses(lambda x, t: ideal(x, t) + 1.0, x0, sigmas, noise=noise)
    torch.testing.assert_close(off["loss"], torch.tensor([1.0]))
    torch.testing.assert_close(off["xs_mse"], c_out**2)
    assert torch.allclose(x_t, x0 + noise * sigmas)


def test_karras_sample_progressive_with_an_edm_denoiser_clips_x0():
    steps = list(karras_sample_progressive(KarrasDenoiser(), lambda x, t: torch.full_like(x, 50.0), (2, 3), 3,
                                           device="cpu", sigma_max=10.0, generator=torch.Generator().manual_seed(0)))
    assert all(s["pred_xstart"].abs().max() <= 1 for s in steps[:-1])


def test_karras_sample_progressive_rejects_bad_arguments():
    diffusion = diffusion_from_config({"schedule": "exp", "timesteps": 16, "mean_type": "x_start"})
    model = lambda x, t: torch.zeros(len(x), 6)  # noqa: E731
    with pytest.raises(ValueError, match="sampler='lms' is unknown"):
        next(karras_sample_progressive(diffusion, model, (1, 3), 4, sampler="lms"))
    with pytest.raises(ValueError, match="does not churn"):
        next(karras_sample_progressive(diffusion, model, (1, 3), 4, sampler="ancestral", s_churn=1.0))
    with pytest.raises(TypeError, match="GaussianDiffusion or a KarrasDenoiser"):
        next(karras_sample_progressive(object(), model, (1, 3), 4))
