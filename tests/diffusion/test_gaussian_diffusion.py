"""GaussianDiffusion against golden file c (official arithmetic) plus config and loss properties."""
import numpy as np
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion, diffusion_from_config, extract
from shap_e.diffusion.schedules import get_named_beta_schedule

ATOL = 1e-6


@pytest.fixture(scope="module")
def c(golden):
    return golden("c")


@pytest.fixture(scope="module")
def diffusion(c):
    return diffusion_from_config(c["config"]["diffusion"])


def _fixed_model(output):
    def model(x, t, **kwargs):
        return output

    return model


def test_derived_arrays_match_golden_float64(c, diffusion):
    for name, expected in c["outputs"]["exp_1024"].items():
        np.testing.assert_allclose(getattr(diffusion, name), expected.numpy(), rtol=1e-12, err_msg=name)


@pytest.mark.parametrize(
    "key,name,args",
    [
        ("inv_parabola_power5_1024_betas", "inv_parabola", {"power": 5.0}),
        ("cosine_1024_betas", "cosine", {}),
        ("linear_1024_betas", "linear", {}),
    ],
)
def test_named_schedules_match_golden(c, key, name, args):
    betas = get_named_beta_schedule(name, 1024, **args)
    np.testing.assert_allclose(betas, c["outputs"][key].numpy(), rtol=1e-12)


def test_extract_gathers_float32_and_broadcasts(diffusion):
    t = torch.tensor([0, 1023])
    values = extract(diffusion.betas, t, (2, 3))
    assert values.dtype == torch.float32 and values.shape == (2, 3)
    assert values[1, 2].item() == np.float32(diffusion.betas[1023])


def test_q_sample_and_q_mean_variance_match_golden(c, diffusion):
    inp, out = c["inputs"], c["outputs"]
    sample = diffusion.q_sample(inp["x_start"], inp["t"], noise=inp["noise"])
    torch.testing.assert_close(sample, out["q_sample"], atol=ATOL, rtol=0)
    mean, variance, log_variance = diffusion.q_mean_variance(inp["x_start"], inp["t"])
    for got, key in [(mean, "mean"), (variance, "variance"), (log_variance, "log_variance")]:
        torch.testing.assert_close(got, out["q_mean_variance"][key], atol=ATOL, rtol=0)


@pytest.mark.parametrize("mean_type", ["x_start", "epsilon"])
@pytest.mark.parametrize("clip", [0, 1])
def test_p_mean_variance_matches_golden(c, mean_type, clip):
    inp = c["inputs"]
    diffusion = diffusion_from_config({**c["config"]["diffusion"], "mean_type": mean_type})
    out = diffusion.p_mean_variance(
        _fixed_model(inp["model_output"]), inp["x_t_for_pmv"], inp["t"], clip_denoised=bool(clip)
    )
    expected = c["outputs"]["p_mean_variance"][f"{mean_type}_clip{clip}"]
    for key in ("mean", "variance", "log_variance", "pred_xstart"):
        torch.testing.assert_close(getattr(out, key), expected[key], atol=ATOL, rtol=1e-6)


def test_p_sample_with_global_rng_matches_golden(c, diffusion):
    inp, expected = c["inputs"], c["outputs"]["p_sample_clip1"]
    torch.manual_seed(301)
    step = diffusion.p_sample(_fixed_model(inp["model_output"]), inp["x_t_for_pmv"], inp["t"], clip_denoised=True)
    torch.testing.assert_close(step.sample, expected["sample"], atol=ATOL, rtol=0)
    torch.testing.assert_close(step.pred_xstart, expected["pred_xstart"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("eta", [0.0, 0.5])
def test_ddim_sample_matches_golden(c, diffusion, eta):
    inp, expected = c["inputs"], c["outputs"][f"ddim_sample_clip1_eta{eta}"]
    torch.manual_seed(302)
    step = diffusion.ddim_sample(
        _fixed_model(inp["model_output"]), inp["x_t_for_pmv"], inp["t"], clip_denoised=True, eta=eta
    )
    torch.testing.assert_close(step.sample, expected["sample"], atol=ATOL, rtol=0)


def test_channel_scales_match_golden_and_round_trip(c):
    inp, out = c["inputs"], c["outputs"]
    diffusion = diffusion_from_config(
        {**c["config"]["diffusion"], "channel_scales": inp["channel_scales"].tolist(),
         "channel_biases": inp["channel_biases"].tolist()}
    )
    scaled = diffusion.scale_channels(inp["x_start"])
    torch.testing.assert_close(scaled, out["scale_channels"], atol=ATOL, rtol=0)
    torch.testing.assert_close(diffusion.unscale_channels(inp["x_start"]), out["unscale_channels"],
                               atol=ATOL, rtol=0)
    torch.testing.assert_close(diffusion.unscale_channels(scaled), inp["x_start"], atol=ATOL, rtol=0)


def test_config_rejects_unknown_keys_listing_valid_ones():
    with pytest.raises(ValueError, match="valid keys.*schedule"):
        diffusion_from_config({"schedule": "exp", "timesteps": 8, "steps": 3})
    with pytest.raises(ValueError, match="mean_type"):
        diffusion_from_config({"schedule": "exp", "timesteps": 8, "mean_type": "score"})


def test_respacing_keeps_cumulative_alphas_and_maps_timesteps():
    base = diffusion_from_config({"schedule": "exp", "timesteps": 64, "mean_type": "x_start"})
    spaced = diffusion_from_config(
        {"schedule": "exp", "timesteps": 64, "mean_type": "x_start", "respacing": "ddim16"}
    )
    assert spaced.num_timesteps == 16
    np.testing.assert_allclose(
        spaced.alphas_cumprod, base.alphas_cumprod[spaced.timestep_map], rtol=1e-12
    )
    seen = []
    spaced.p_mean_variance(lambda x, t: seen.append(t) or torch.zeros(1, 4),
                           torch.zeros(1, 2), torch.tensor([15]))
    assert seen[0].tolist() == [60]


def _linear_model(weight):
    def model(x, t, **kwargs):
        return x @ weight

    return model


def test_training_losses_sum_and_stop_gradient_on_mean():
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("exp", 32), model_mean_type="x_start")
    weight = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)).requires_grad_()
    x_start = torch.rand(3, 4, generator=torch.Generator().manual_seed(1)) * 2 - 1
    t = torch.tensor([0, 5, 31])
    terms = diffusion.training_losses(_linear_model(weight), x_start, t)
    torch.testing.assert_close(terms["loss"], terms["mse"] + terms["vb"])
    assert (terms["vb"][1:] >= 0).all()
    (grad,) = torch.autograd.grad(terms["vb"].sum(), weight)
    # The vb term must only train the variance half of the output (columns 4..7).
    assert grad[:, :4].abs().max() == 0 and grad[:, 4:].abs().max() > 0


def test_training_mse_is_zero_for_a_perfect_epsilon_model():
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("linear", 64), model_mean_type="epsilon")
    noise = torch.randn(2, 4)

    def oracle(x, t, **kwargs):
        return torch.cat([noise, torch.zeros_like(noise)], dim=1)

    terms = diffusion.training_losses(oracle, torch.zeros(2, 4), torch.tensor([3, 9]), noise=noise)
    assert terms["mse"].abs().max() == 0


def test_ddim_loop_with_eta_zero_is_deterministic_and_reaches_the_data_point():
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("cosine", 32), model_mean_type="x_start")
    target = torch.full((2, 3), 0.25)

    def oracle(x, t, **kwargs):
        return torch.cat([target, torch.zeros_like(target)], dim=1)

    runs = [diffusion.ddim_sample_loop(oracle, (2, 3), generator=torch.Generator().manual_seed(s))
            for s in (0, 1)]
    torch.testing.assert_close(runs[0], target)
    torch.testing.assert_close(runs[1], target)


def test_p_sample_loop_consumes_one_noise_per_step_from_its_generator():
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("exp", 4), model_mean_type="x_start")
    zero = lambda x, t, **kwargs: torch.zeros(len(x), 2 * x.shape[1])  # noqa: E731
    generator = torch.Generator().manual_seed(9)
    diffusion.p_sample_loop(zero, (1, 2), generator=generator)
    replay = torch.Generator().manual_seed(9)
    for _ in range(1 + 4):  # x_T, then one draw per timestep (also at t = 0)
        torch.randn(1, 2, generator=replay)
    assert torch.equal(torch.randn(3, generator=generator), torch.randn(3, generator=replay))


def test_clip_xstart_clamps_to_the_data_range_through_the_channel_scaling():
    plain = diffusion_from_config({"schedule": "cosine", "timesteps": 8})
    x = torch.tensor([[-3.0, 0.5, 2.0]])
    assert torch.equal(plain.clip_xstart(x), x.clamp(-1, 1))
    scaled = diffusion_from_config({"schedule": "cosine", "timesteps": 8, "channel_scales": [2.0, 10.0, 0.5],
                                    "channel_biases": [1.0, -1.0, 0.0]})
    data = torch.tensor([[-1.5, 0.25, 4.0]])  # in data space: below, inside and above [-1, 1]
    clipped = scaled.unscale_channels(scaled.clip_xstart(scaled.scale_channels(data)))
    torch.testing.assert_close(clipped, torch.tensor([[-1.0, 0.25, 1.0]]))


def test_v_prediction_target_and_x0_reconstruction_agree():
    diffusion = diffusion_from_config({"schedule": "cosine", "timesteps": 64, "mean_type": "v"})
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.rand(3, 6, generator=g) * 2 - 1, torch.randn(3, 6, generator=g)
    t = torch.tensor([0, 30, 63])
    ab = torch.from_numpy(diffusion.alphas_cumprod).float()[t, None]
    v = ab.sqrt() * noise - (1 - ab).sqrt() * x0

    def oracle(x_t, timesteps):
        return torch.cat([v, torch.zeros_like(v)], dim=1)

    losses = diffusion.training_losses(oracle, x0, t, noise=noise)
    assert losses["mse"].abs().max() < 1e-10
    x_t = diffusion.q_sample(x0, t, noise)
    out = diffusion.p_mean_variance(oracle, x_t, t, clip_denoised=False)
    torch.testing.assert_close(out.pred_xstart, x0, atol=1e-5, rtol=0)


def test_the_t0_term_of_the_bound_follows_the_configs_discretized_t0():
    from shap_e.models.download import load_config

    official = diffusion_from_config({"schedule": "cosine", "timesteps": 16, "mean_type": "v"})
    discretized = diffusion_from_config({"schedule": "cosine", "timesteps": 16, "mean_type": "v", "discretized_t0": True})
    g = torch.Generator().manual_seed(0)
    x0, noise, w = torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g), torch.randn(8, 16, generator=g)
    t = torch.tensor([0, 3])

    def model(x, t, **kwargs):
        return torch.tanh(x @ w)

    a = official.training_losses(model, x0, t, noise=noise)["vb"]
    b = discretized.training_losses(model, x0, t, noise=noise)["vb"]
    assert a[0] == 0 and b[0] > 0 and a[1] == b[1]
    assert diffusion_from_config(load_config("diffusion-small")).discretized_t0  # how the small priors trained
    assert not diffusion_from_config(load_config("diffusion")).discretized_t0
    with pytest.raises(ValueError, match="discretized_t0"):
        diffusion_from_config({"schedule": "cosine", "timesteps": 16, "discretized_t0": "yes"})
