"""`GaussianDiffusion.training_losses` and `calc_bpd_loop`: each term against a hand computation in
float64 NumPy, for every loss type, mean type and variance type of the official constructor."""
import math

import numpy as np
import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion, SpacedDiffusion, get_named_beta_schedule

T = 8
G = torch.Generator().manual_seed(0)
X0 = torch.rand(2, 3, generator=G) * 2 - 1
NOISE = torch.randn(2, 3, generator=G)
MEAN_PART = torch.randn(2, 3, generator=G) * 0.5
VAR_PART = torch.rand(2, 3, generator=G) * 2 - 1
TIMESTEPS = torch.tensor([0, 5])


def _diffusion(**kwargs):
    return GaussianDiffusion(betas=get_named_beta_schedule("exp", T), **{"model_mean_type": "x_start", **kwargs})


def _fixed(output):
    return lambda x, t, **kwargs: output


def _by_hand(diffusion, var_part=VAR_PART, mean_type="x_start"):
    """(x_t, mse, vb) in float64 for the fixed model output [MEAN_PART | var_part]."""
    x0, eps, m, v = (a.double().numpy() for a in (X0, NOISE, MEAN_PART, var_part))
    t = TIMESTEPS.numpy()[:, None]
    ab, ab_prev, beta = diffusion.alphas_cumprod[t], diffusion.alphas_cumprod_prev[t], diffusion.betas[t]
    x_t = np.sqrt(ab) * x0 + np.sqrt(1 - ab) * eps
    coef1, coef2 = beta * np.sqrt(ab_prev) / (1 - ab), (1 - ab_prev) * np.sqrt(1 - beta) / (1 - ab)
    posterior_log_var = diffusion.posterior_log_variance_clipped[t]
    target = {"x_start": x0, "epsilon": eps, "x_prev": coef1 * x0 + coef2 * x_t}[mean_type]
    mse = ((target - m) ** 2).mean(1)
    pred_x0 = {"x_start": m, "epsilon": (x_t - np.sqrt(1 - ab) * m) / np.sqrt(ab)}.get(mean_type)
    model_mean = m if mean_type == "x_prev" else coef1 * pred_x0 + coef2 * x_t
    frac = (v + 1) / 2
    model_log_var = frac * np.log(beta) + (1 - frac) * posterior_log_var
    true_mean = coef1 * x0 + coef2 * x_t
    kl = 0.5 * (-1 + model_log_var - posterior_log_var + np.exp(posterior_log_var - model_log_var)
                + (true_mean - model_mean) ** 2 * np.exp(-model_log_var))
    vb = np.where(TIMESTEPS.numpy() == 0, 0.0, kl.mean(1) / math.log(2))
    return x_t, mse, vb


def _close(got, expected):
    np.testing.assert_allclose(got.detach().double().numpy(), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("mean_type", ["x_start", "epsilon", "x_prev"])
def test_mse_loss_terms_match_the_hand_computation(mean_type):
    diffusion = _diffusion(model_mean_type=mean_type)
    seen = {}

    def model(x, t):
        seen.update(x=x, t=t)
        return torch.cat([MEAN_PART, VAR_PART], dim=1)

    terms = diffusion.training_losses(model, X0, TIMESTEPS, noise=NOISE)
    x_t, mse, vb = _by_hand(diffusion, mean_type=mean_type)
    _close(seen["x"], x_t)
    _close(terms["mse"], mse)
    _close(terms["vb"], vb)
    _close(terms["loss"], mse + vb)
    assert sorted(terms) == ["loss", "mse", "vb"] and terms["vb"][0] == 0  # t = 0 term is 0 by default


def test_rescaled_mse_scales_the_bound_by_t_over_1000():
    plain = _diffusion().training_losses(_fixed(torch.cat([MEAN_PART, VAR_PART], 1)), X0, TIMESTEPS, noise=NOISE)
    rescaled = _diffusion(loss_type="rescaled_mse").training_losses(
        _fixed(torch.cat([MEAN_PART, VAR_PART], 1)), X0, TIMESTEPS, noise=NOISE)
    _close(rescaled["vb"], plain["vb"].double().numpy() * T / 1000)
    _close(rescaled["loss"], (plain["mse"] + plain["vb"] * T / 1000).double().numpy())


@pytest.mark.parametrize("loss_type,factor", [("kl", 1), ("rescaled_kl", T)])
def test_kl_losses_are_the_bound_and_train_the_mean_too(loss_type, factor):
    mean_part = MEAN_PART.clone().requires_grad_()
    diffusion = _diffusion(loss_type=loss_type)
    terms = diffusion.training_losses(lambda x, t: torch.cat([mean_part, VAR_PART], 1), X0, TIMESTEPS, noise=NOISE)
    assert sorted(terms) == ["loss"]
    _close(terms["loss"], _by_hand(diffusion)[2] * factor)
    (grad,) = torch.autograd.grad(terms["loss"].sum(), mean_part)
    assert grad[1].abs().max() > 0  # unlike the mse losses' vb term, the KL trains the mean


def test_discretized_t0_makes_the_t0_term_the_decoder_nll_in_bits():
    diffusion = _diffusion(discretized_t0=True)
    terms = diffusion.training_losses(_fixed(torch.cat([MEAN_PART, VAR_PART], 1)), X0, TIMESTEPS, noise=NOISE)
    x_t, _, vb = _by_hand(diffusion)
    x0, m, v = (a.double().numpy()[0] for a in (X0, MEAN_PART, VAR_PART))
    # At t = 0 the posterior mean coefficients are (1, 0): the model mean is its x̂₀ itself.
    frac = (v + 1) / 2
    log_var = frac * np.log(diffusion.betas[0]) + (1 - frac) * diffusion.posterior_log_variance_clipped[0]

    def cdf(z):
        return 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))

    inv_std = np.exp(-0.5 * log_var)
    p = cdf(inv_std * (x0 - m + 1 / 255)) - cdf(inv_std * (x0 - m - 1 / 255))
    _close(terms["vb"], [-np.log(p).mean() / math.log(2), vb[1]])


@pytest.mark.parametrize("var_type", ["fixed_small", "fixed_large"])
def test_fixed_variances_take_a_d_channel_output_and_have_no_bound_term(var_type):
    diffusion = _diffusion(model_var_type=var_type)
    terms = diffusion.training_losses(_fixed(MEAN_PART), X0, TIMESTEPS, noise=NOISE)
    assert sorted(terms) == ["loss", "mse"]
    _close(terms["loss"], _by_hand(diffusion)[1])


def test_learned_variance_is_the_log_variance_output():
    diffusion = _diffusion(model_var_type="learned")
    log_var = torch.full((2, 3), -3.0)
    out = diffusion.p_mean_variance(_fixed(torch.cat([MEAN_PART, log_var], 1)), X0, TIMESTEPS)
    assert torch.equal(out.log_variance, log_var) and torch.allclose(out.variance, log_var.exp())
    with pytest.raises(ValueError, match="expected 2 \\* 3"):
        diffusion.p_mean_variance(_fixed(MEAN_PART), X0, TIMESTEPS)


def test_extra_losses_of_a_tuple_output_are_added_with_their_scale():
    aux = torch.tensor([1.0, 2.0])
    output = (torch.cat([MEAN_PART, VAR_PART], 1), {"losses": {"aux": (aux, 0.5)}})
    terms = _diffusion().training_losses(_fixed(output), X0, TIMESTEPS, noise=NOISE)
    _, mse, vb = _by_hand(_diffusion())
    assert torch.equal(terms["aux"], aux)
    _close(terms["loss"], mse + vb + 0.5 * aux.numpy())


def test_channel_scaling_applies_to_x_start_before_noising():
    scales, biases = np.array([2.0, 1.0, 0.5]), np.array([0.1, 0.0, -0.2])
    diffusion = _diffusion(channel_scales=scales, channel_biases=biases)
    seen = {}

    def model(x, t):
        seen["x"] = x
        return torch.zeros(2, 6)

    diffusion.training_losses(model, X0, TIMESTEPS, noise=NOISE)
    scaled = X0.double().numpy() * scales + biases
    ab = diffusion.alphas_cumprod[TIMESTEPS.numpy()][:, None]
    _close(seen["x"], np.sqrt(ab) * scaled + np.sqrt(1 - ab) * NOISE.double().numpy())


def test_spaced_diffusion_losses_show_the_model_the_original_timesteps():
    base = dict(betas=get_named_beta_schedule("exp", 16), model_mean_type="x_start", model_var_type="learned_range",
                loss_type="mse")
    spaced = SpacedDiffusion(use_timesteps=[0, 5, 10, 15], **base)
    assert spaced.num_timesteps == 4 and spaced.original_num_steps == 16
    seen = {}

    def model(x, t):
        seen["t"] = t
        return torch.zeros(2, 6)

    spaced.training_losses(model, X0, torch.tensor([1, 3]))
    assert seen["t"].tolist() == [5, 15]


def test_calc_bpd_loop_sums_the_bound_and_the_prior_term():
    diffusion = _diffusion()
    out = diffusion.calc_bpd_loop(_fixed(torch.cat([MEAN_PART, VAR_PART], 1)), X0,
                                  generator=torch.Generator().manual_seed(1))
    assert out["vb"].shape == out["xstart_mse"].shape == out["mse"].shape == (2, T)
    ab = diffusion.alphas_cumprod[-1]
    x0 = X0.double().numpy()
    prior = 0.5 * (-1 - np.log(1 - ab) + (1 - ab) + ab * x0**2).mean(1) / math.log(2)
    _close(out["prior_bpd"], prior)
    _close(out["total_bpd"], (out["vb"].sum(1) + out["prior_bpd"]).double().numpy())
    _close(out["xstart_mse"], np.repeat(((MEAN_PART.double().numpy() - x0) ** 2).mean(1)[:, None], T, 1))
    assert (out["vb"][:, -1] == 0).all()  # the last column is t = 0
    again = diffusion.calc_bpd_loop(_fixed(torch.cat([MEAN_PART, VAR_PART], 1)), X0,
                                    generator=torch.Generator().manual_seed(1))
    assert torch.equal(again["mse"], out["mse"])
