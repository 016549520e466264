"""Training losses and the variational bound of a Gaussian diffusion (Ho et al. 2020 §3.3; Nichol &
Dhariwal 2021 §3.1): the bodies of `GaussianDiffusion.training_losses` and `calc_bpd_loop`.

Terms are per sample (`[batch]`); the bound's terms are in bits (nats / ln 2), as in the reference.
"""
import math
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import torch

from shap_e.diffusion.losses import discretized_gaussian_log_likelihood, mean_flat, normal_kl
from shap_e.diffusion.noise import GeneratorArg, randn_like
from shap_e.diffusion.steps import MeanVariance

if TYPE_CHECKING:
    from shap_e.diffusion.process import DiffusionProcess, ModelFn

__all__ = ["calc_bpd_loop", "prior_bpd", "training_losses", "vb_terms_bpd"]

LN2 = math.log(2.0)


def vb_terms_bpd(
    diffusion: "DiffusionProcess", output: Any, x_start: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
    clip_denoised: bool = False,
) -> Tuple[torch.Tensor, MeanVariance]:
    """One term of the bound for a model `output` at x_t: KL(q(x_{t-1}|x_t,x_0) ‖ p(x_{t-1}|x_t))
    for t > 0; at t = 0 the discretised decoder NLL with `discretized_t0`, else 0.

    :return: `(term [batch] in bits, p's MeanVariance)`.
    """
    true_mean, _, true_log_variance = diffusion.q_posterior_mean_variance(x_start, x_t, t)
    out = diffusion.mean_variance_from_output(output, x_t, t, clip_denoised)
    kl = mean_flat(normal_kl(true_mean, true_log_variance, out.mean, out.log_variance)) / LN2
    if diffusion.discretized_t0:
        nll = -discretized_gaussian_log_likelihood(x_start, means=out.mean, log_scales=0.5 * out.log_variance)
        decoder_nll = mean_flat(nll) / LN2
    else:
        decoder_nll = torch.zeros_like(kl)
    return torch.where(t == 0, decoder_nll, kl), out


def training_losses(
    diffusion: "DiffusionProcess", model: "ModelFn", x_start: torch.Tensor, t: torch.Tensor,
    model_kwargs: Optional[Dict[str, Any]] = None, noise: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """Loss terms for data `x_start` `[batch, d]` (in data space) noised to timesteps `t` `[batch]`.

    * `kl` / `rescaled_kl`: `loss` is the bound's term (× T when rescaled).
    * `mse` / `rescaled_mse`: `mse` regresses the mean part on its target (x₀, ε, v or the posterior
      mean); with learned variances `vb` is the bound's term computed with the mean part detached, so
      it trains only the variance part (× T/1000 when rescaled); `loss = mse + vb`.

    A model that returns `(output, {"losses": {name: (loss [batch], scale)}})` adds each extra loss
    as a term and `scale · loss` to `loss`.
    """
    x_start = diffusion.scale_channels(x_start)
    if noise is None:
        noise = torch.randn_like(x_start)
    x_t = diffusion.q_sample(x_start, t, noise=noise)
    output = model(x_t, diffusion.model_timesteps(t), **(model_kwargs or {}))
    output, extra = output if isinstance(output, tuple) else (output, None)
    if diffusion.loss_type in ("kl", "rescaled_kl"):
        loss, _ = vb_terms_bpd(diffusion, output, x_start, x_t, t)
        terms = {"loss": loss * diffusion.num_timesteps if diffusion.loss_type == "rescaled_kl" else loss}
    else:
        terms = _mse_terms(diffusion, output, x_start, x_t, t, noise)
    for name, (loss, scale) in ((extra or {}).get("losses") or {}).items():
        terms[name] = loss
        terms["loss"] = terms["loss"] + loss * scale
    return terms


def _mse_terms(diffusion, output, x_start, x_t, t, noise) -> Dict[str, torch.Tensor]:
    terms = {}
    if diffusion.model_var_type in ("learned", "learned_range"):
        if output.shape[1] != 2 * x_t.shape[1]:
            raise ValueError(f"model output has {output.shape[1]} channels, expected 2 * {x_t.shape[1]}")
        output, var_values = torch.split(output, x_t.shape[1], dim=1)
        # The bound trains the variance only: the mean part enters it detached.
        terms["vb"], _ = vb_terms_bpd(diffusion, torch.cat([output.detach(), var_values], dim=1), x_start, x_t, t)
        if diffusion.loss_type == "rescaled_mse":
            terms["vb"] = terms["vb"] * (diffusion.num_timesteps / 1000.0)
    terms["mse"] = mean_flat((_mean_target(diffusion, x_start, x_t, t, noise) - output) ** 2)
    terms["loss"] = terms["mse"] + terms["vb"] if "vb" in terms else terms["mse"]
    return terms


def _mean_target(diffusion, x_start, x_t, t, noise) -> torch.Tensor:
    """What the mean part should predict: x₀, ε, the posterior mean or v = √ᾱ_t ε − √(1−ᾱ_t) x₀."""
    if diffusion.model_mean_type == "x_start":
        return x_start
    if diffusion.model_mean_type == "epsilon":
        return noise
    if diffusion.model_mean_type == "x_prev":
        return diffusion.q_posterior_mean_variance(x_start, x_t, t)[0]
    return diffusion.v_from_eps(x_start, t, noise)


def prior_bpd(diffusion: "DiffusionProcess", x_start: torch.Tensor) -> torch.Tensor:
    """KL(q(x_T | x_0) ‖ N(0, I)) in bits per sample `[batch]`: the bound's term no model changes."""
    t = torch.full((x_start.shape[0],), diffusion.num_timesteps - 1, dtype=torch.int64, device=x_start.device)
    mean, _, log_variance = diffusion.q_mean_variance(x_start, t)
    return mean_flat(normal_kl(mean, log_variance, 0.0, 0.0)) / LN2


def calc_bpd_loop(
    diffusion: "DiffusionProcess", model: "ModelFn", x_start: torch.Tensor, clip_denoised: bool = False,
    model_kwargs: Optional[Dict[str, Any]] = None, generator: GeneratorArg = None,
) -> Dict[str, torch.Tensor]:
    """The whole bound of `x_start` `[batch, d]`, one fresh noise per timestep from T−1 down to 0.

    :return: `total_bpd` and `prior_bpd` `[batch]`; `vb`, `xstart_mse`, `mse` (of ε̂) `[batch, T]`
        with column i for timestep T−1−i.
    """
    vb, xstart_mse, mse = [], [], []
    for step in range(diffusion.num_timesteps - 1, -1, -1):
        t = torch.full((x_start.shape[0],), step, dtype=torch.int64, device=x_start.device)
        noise = randn_like(x_start, generator)
        x_t = diffusion.q_sample(x_start, t, noise=noise)
        with torch.no_grad():
            output = model(x_t, diffusion.model_timesteps(t), **(model_kwargs or {}))
            term, out = vb_terms_bpd(diffusion, output, x_start, x_t, t, clip_denoised)
        vb.append(term)
        xstart_mse.append(mean_flat((out.pred_xstart - x_start) ** 2))
        eps = diffusion.predict_eps_from_xstart(x_t, t, out.pred_xstart)
        mse.append(mean_flat((eps - noise) ** 2))
    vb_all = torch.stack(vb, dim=1)
    prior = prior_bpd(diffusion, x_start)
    return {"total_bpd": vb_all.sum(dim=1) + prior, "prior_bpd": prior, "vb": vb_all,
            "xstart_mse": torch.stack(xstart_mse, dim=1), "mse": torch.stack(mse, dim=1)}
