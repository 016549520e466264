"""Log-likelihood helpers for the variational-bound term of the diffusion loss (official names and
signatures; `shap_e.diffusion.gaussian_diffusion` re-exports them)."""
import math
from typing import Union

import torch

__all__ = ["approx_standard_normal_cdf", "discretized_gaussian_log_likelihood", "mean_flat", "normal_kl"]

TensorOrFloat = Union[torch.Tensor, float]


def mean_flat(tensor: torch.Tensor) -> torch.Tensor:
    """Mean over every dimension but the batch: `[batch, ...] -> [batch]`."""
    return tensor.flatten(start_dim=1).mean(dim=1)


def normal_kl(
    mean1: TensorOrFloat, logvar1: TensorOrFloat, mean2: TensorOrFloat, logvar2: TensorOrFloat
) -> torch.Tensor:
    """Elementwise KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)) in nats, broadcasting.

    Any argument may be a Python number (e.g. the standard normal prior, `mean2=0.0, logvar2=0.0`),
    but at least one must be a tensor: it sets the dtype and device.
    """
    like = next((v for v in (mean1, logvar1, mean2, logvar2) if isinstance(v, torch.Tensor)), None)
    if like is None:
        raise TypeError("normal_kl needs at least one tensor argument")
    logvar1, logvar2 = (v if isinstance(v, torch.Tensor) else torch.tensor(v).to(like) for v in (logvar1, logvar2))
    return 0.5 * (
        -1.0
        + logvar2
        - logvar1
        + torch.exp(logvar1 - logvar2)
        + (mean1 - mean2) ** 2 * torch.exp(-logvar2)
    )


def approx_standard_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Fast tanh approximation of the standard normal CDF (Page 1977)."""
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def discretized_gaussian_log_likelihood(
    x: torch.Tensor, *, means: torch.Tensor, log_scales: torch.Tensor
) -> torch.Tensor:
    """Elementwise log-likelihood (nats) of `x` in [-1, 1] quantised to 256 bins (DDPM eq. 13).

    `means` and `log_scales` (log standard deviations) have `x`'s shape. The outermost bins extend
    to ±infinity so the probabilities sum to one.
    """
    if not x.shape == means.shape == log_scales.shape:
        raise ValueError(
            f"x, means and log_scales must have one shape, got {list(x.shape)}, {list(means.shape)}, "
            f"{list(log_scales.shape)}"
        )
    centered = x - means
    inv_std = torch.exp(-log_scales)
    cdf_plus = approx_standard_normal_cdf(inv_std * (centered + 1.0 / 255.0))
    cdf_min = approx_standard_normal_cdf(inv_std * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(
        x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, log_delta)
    )
