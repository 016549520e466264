"""Log-likelihood helpers for the variational-bound term of the diffusion loss."""
import math

import torch


def mean_flat(x: torch.Tensor) -> torch.Tensor:
    """Mean over every dimension but the batch: `[batch, ...] -> [batch]`."""
    return x.mean(dim=tuple(range(1, x.ndim)))


def normal_kl(
    mean1: torch.Tensor, logvar1: torch.Tensor, mean2: torch.Tensor, logvar2: torch.Tensor
) -> torch.Tensor:
    """Elementwise KL(N(mean1, e^logvar1) || N(mean2, e^logvar2)) in nats (broadcasting)."""
    return 0.5 * (
        -1.0
        + logvar2
        - logvar1
        + torch.exp(logvar1 - logvar2)
        + (mean1 - mean2) ** 2 * torch.exp(-logvar2)
    )


def approx_standard_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """Fast tanh approximation of the standard normal CDF (Page 1977)."""
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def discretized_gaussian_log_likelihood(
    x: torch.Tensor, means: torch.Tensor, log_scales: torch.Tensor
) -> torch.Tensor:
    """Elementwise log-likelihood (nats) of `x` in [-1, 1] quantised to 256 bins (DDPM eq. 13).

    The outermost bins extend to ±infinity so the probabilities sum to one.
    """
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
