"""`GaussianDiffusion`'s reverse process under the official constructor: variance and mean types,
classifier guidance, DDIM inversion and the progressive loops, against hand computations."""
import numpy as np
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion, SpacedDiffusion, get_named_beta_schedule

T = 8
G = torch.Generator().manual_seed(3)
X = torch.randn(2, 3, generator=G)
X0 = torch.rand(2, 3, generator=G) * 2 - 1
TIMESTEPS = torch.tensor([1, 6])


def _diffusion(**kwargs):
    return GaussianDiffusion(betas=get_named_beta_schedule("exp", T), **{"model_mean_type": "x_start", **kwargs})


def _fixed(output):
    return lambda x, t, **kwargs: output


def _gather(array, shape=(2, 3)):
    return torch.from_numpy(array[TIMESTEPS.numpy()]).float()[:, None].expand(shape)


def test_p_mean_variance_result_reads_as_the_official_dict():
    out = _diffusion().p_mean_variance(_fixed((torch.cat([X0, X0], 1), {"note": 1})), X, TIMESTEPS)
    assert list(out) == ["mean", "variance", "log_variance", "pred_xstart", "extra"]
    assert out["pred_xstart"] is out.pred_xstart and out["extra"] == {"note": 1} and "mean" in out
    copy = out.copy()
    copy["mean"] = torch.zeros(2, 3)
    assert not torch.equal(out.mean, copy.mean)
    with pytest.raises(KeyError):
        out["sample"]


@pytest.mark.parametrize("var_type", ["fixed_small", "fixed_large"])
def test_fixed_variances_are_the_posterior_variance_or_beta(var_type):
    diffusion = _diffusion(model_var_type=var_type)
    out = diffusion.p_mean_variance(_fixed(X0), X, TIMESTEPS)
    expected = diffusion.posterior_variance if var_type == "fixed_small" else diffusion.betas
    torch.testing.assert_close(out.variance, _gather(expected))
    torch.testing.assert_close(out.log_variance, torch.log(_gather(expected)))
    first = diffusion.p_mean_variance(_fixed(X0), X, torch.tensor([0, 0]))
    # At t = 0 the posterior variance is 0; fixed_large raises it to the t = 1 value.
    expected_first = 0.0 if var_type == "fixed_small" else diffusion.posterior_variance[1]
    assert first.variance[0, 0].item() == pytest.approx(expected_first, rel=1e-6)
    assert first.log_variance[0, 0].item() == pytest.approx(np.log(diffusion.posterior_variance[1]), rel=1e-6)


def test_x_prev_models_predict_the_posterior_mean_and_invert_it_to_x0():
    diffusion = _diffusion(model_mean_type="x_prev", model_var_type="fixed_small")
    posterior_mean, _, _ = diffusion.q_posterior_mean_variance(X0, X, TIMESTEPS)
    out = diffusion.p_mean_variance(_fixed(posterior_mean), X, TIMESTEPS)
    assert torch.equal(out.mean, posterior_mean)
    torch.testing.assert_close(out.pred_xstart, X0, atol=1e-5, rtol=0)


def test_denoised_fn_applies_before_the_clamp():
    out = _diffusion().p_mean_variance(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS, clip_denoised=True,
                                       denoised_fn=lambda x0: x0 * 10)
    assert torch.equal(out.pred_xstart, (X0 * 10).clamp(-1, 1))


def test_condition_mean_shifts_the_mean_by_variance_times_gradient():
    diffusion = _diffusion()
    out = diffusion.p_mean_variance(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS)
    gradient = torch.full((2, 3), 2.0)
    shifted = diffusion.condition_mean(lambda x, t, **kw: gradient, out, X, TIMESTEPS)
    torch.testing.assert_close(shifted, out.mean + out.variance * 2.0)
    seeds = [torch.Generator().manual_seed(5) for _ in range(2)]
    plain = diffusion.p_sample(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS, generator=seeds[0])
    guided = diffusion.p_sample(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS,
                                cond_fn=lambda x, t, **kw: gradient, generator=seeds[1])
    torch.testing.assert_close(guided.sample - plain.sample, out.variance * 2.0)


def test_condition_score_shifts_eps_by_the_scaled_gradient():
    diffusion = _diffusion()
    out = diffusion.p_mean_variance(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS)
    conditioned = diffusion.condition_score(lambda x, t, **kw: torch.ones(2, 3), out, X, TIMESTEPS)
    ab = _gather(diffusion.alphas_cumprod)
    eps = (X - ab.sqrt() * X0) / (1 - ab).sqrt() - (1 - ab).sqrt()
    torch.testing.assert_close(conditioned.pred_xstart, (X - (1 - ab).sqrt() * eps) / ab.sqrt(), atol=1e-5, rtol=1e-5)
    assert torch.equal(out.pred_xstart, torch.cat([X0, X0], 1)[:, :3])  # the input is not modified


def test_spaced_diffusion_shows_cond_fn_the_original_timesteps():
    spaced = SpacedDiffusion(use_timesteps=range(0, 16, 2), betas=get_named_beta_schedule("exp", 16),
                             model_mean_type="x_start", model_var_type="learned_range", loss_type="mse")
    seen = []
    out = spaced.p_mean_variance(_fixed(torch.cat([X0, X0], 1)), X, TIMESTEPS)
    spaced.condition_mean(lambda x, t: seen.append(t.tolist()) or torch.zeros(2, 3), out, X, TIMESTEPS)
    assert seen == [[2, 12]]


def test_ddim_reverse_sample_is_undone_by_ddim_sample():
    diffusion = _diffusion()
    oracle = _fixed(torch.cat([X0, torch.zeros(2, 3)], 1))  # the same x̂₀ at every t: the ODE is exact
    x_t = diffusion.q_sample(X0, TIMESTEPS, noise=X)
    up = diffusion.ddim_reverse_sample(oracle, x_t, TIMESTEPS)
    back = diffusion.ddim_sample(oracle, up["sample"], TIMESTEPS + 1)
    torch.testing.assert_close(back["sample"], x_t, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="eta=0.5"):
        diffusion.ddim_reverse_sample(oracle, x_t, TIMESTEPS, eta=0.5)


@pytest.mark.parametrize("loop", ["p_sample_loop", "ddim_sample_loop"])
def test_progressive_loops_yield_unscaled_step_dicts_ending_at_the_loop_result(loop):
    diffusion = _diffusion(channel_scales=np.array([2.0, 2.0, 2.0]), channel_biases=np.zeros(3))
    model = _fixed(torch.cat([X0 * 2, torch.zeros(2, 3)], 1))
    steps = list(getattr(diffusion, loop + "_progressive")(model, (2, 3), generator=torch.Generator().manual_seed(1)))
    final = getattr(diffusion, loop)(model, (2, 3), generator=torch.Generator().manual_seed(1))
    assert len(steps) == T and all(type(s) is dict and sorted(s) == ["pred_xstart", "sample"] for s in steps)
    assert torch.equal(steps[-1]["sample"], final)
    torch.testing.assert_close(steps[0]["pred_xstart"], X0)  # x̂₀ = 2 X0 in diffusion space, X0 in data space


def test_loops_scale_the_start_noise_by_temp_and_run_without_gradients():
    seen = []

    def model(x, t):
        seen.append((x.clone(), torch.is_grad_enabled()))
        return torch.zeros(2, 6)

    _diffusion().p_sample_loop(model, (2, 3), temp=0.5, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(seen[0][0], 0.5 * torch.randn(2, 3, generator=torch.Generator().manual_seed(2)))
    assert not any(grad for _, grad in seen)
    with pytest.raises(ValueError, match="shape must be a tuple"):
        next(_diffusion().p_sample_loop_progressive(model, 2))


def test_get_sigmas_and_unscale_out_dict():
    diffusion = _diffusion(channel_scales=np.array([2.0, 4.0, 1.0]), channel_biases=np.array([1.0, 0.0, 0.0]))
    t = torch.tensor([[0, 7]])
    sigmas = diffusion.get_sigmas(t)
    expected = np.sqrt(1 / diffusion.alphas_cumprod[[0, 7]] - 1)
    assert sigmas.shape == (1, 2) and np.allclose(sigmas.numpy(), expected, rtol=1e-6)
    out = diffusion.unscale_out_dict({"sample": torch.tensor([[3.0, 4.0, 5.0]]), "i": 3})
    assert out["i"] == 3 and out["sample"].tolist() == [[1.0, 1.0, 5.0]]


def test_constructor_names_the_bad_argument():
    with pytest.raises(ValueError, match="model_var_type='small'"):
        _diffusion(model_var_type="small")
    with pytest.raises(ValueError, match="loss_type='l1'"):
        _diffusion(loss_type="l1")
    with pytest.raises(TypeError):
        GaussianDiffusion(get_named_beta_schedule("exp", T))  # keyword-only, as the official class
