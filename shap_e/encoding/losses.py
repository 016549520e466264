"""The field supervision shared by transmitter training and latent refinement: L1 terms on signed
distances and surface colours sampled from an asset (`shap_e.encoding.targets`)."""
from typing import Tuple

import torch

__all__ = ["sdf_color_losses"]


def sdf_color_losses(
    sdf: torch.Tensor, sdf_target: torch.Tensor, color: torch.Tensor, color_target: torch.Tensor, sdf_band: float = 0.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The per-row L1 terms of the field supervision: `(sdf [batch], color [batch])`.

    sdf, sdf_target: `[batch, n]` (the target is clamped to +-1); `sdf_band > 0` adds the L1 of both
    clamped to +-`sdf_band` and divided by it. color, color_target: `[batch, m, 3]` sRGB.
    """
    sdf_target = sdf_target.clamp(-1, 1)
    loss_sdf = (sdf - sdf_target).abs().mean(dim=1)
    if sdf_band > 0:
        band = ((sdf / sdf_band).clamp(-1, 1) - (sdf_target / sdf_band).clamp(-1, 1)).abs().mean(dim=1)
        loss_sdf = loss_sdf + band
    return loss_sdf, (color - color_target).abs().mean(dim=(1, 2))
