"""The sRGB transfer function (IEC 61966-2-1) and its inverse, elementwise on values in [0, 1]."""
import torch

__all__ = ["linear_to_srgb", "srgb_to_linear"]


def srgb_to_linear(u: torch.Tensor) -> torch.Tensor:
    """sRGB-encoded values -> linear light."""
    return torch.where(u <= 0.04045, u / 12.92, ((u + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(u: torch.Tensor) -> torch.Tensor:
    """Linear light -> sRGB-encoded values (the clamp keeps the unused branch finite for gradients)."""
    return torch.where(u <= 0.0031308, 12.92 * u, 1.055 * u.clamp(min=0.0031308) ** (1 / 2.4) - 0.055)
