"""NeRF heads derived in closed form from a NeRSTF MLP's SDF and STF colour heads.

A NeRSTF field trained only on signed distances and STF colours (NeRF loss weight 0, as the small
bundled transmitter) leaves its NeRF rows untrained, and its NeRF views come out black. The last
layer is an ordinary linear (docs/behaviour.md#nerstf-mlp), so the NeRF rows can be written from
the rows that were trained, without ray marching:

- densities (coarse and fine): `relu(density_scale * o_sdf)`, where `o_sdf` is the SDF head's raw
  output (positive inside): zero outside the surface and rising steeply inside it, so rays stop
  within about `sqrt(2 / density_scale)` of the surface;
- NeRF colours (coarse and fine): the STF colour head's rows, so both modes show the same albedo.

Only rows 1, 2 and 6..11 of the last layer change; the SDF and STF colour outputs, and so every
STF mesh and image, stay bit for bit.
"""
from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from shap_e.models.nerstf.mlp import HEADS, N_OUTPUTS

__all__ = [
    "DEFAULT_DENSITY_SCALE", "NerfHeadSettings", "derive_nerf_heads_in_state", "derived_last_layer",
]

# Chosen on validation latents (train-split objects) among 10, 30, 100, 300, 1000 and 3000: the
# smallest mean level difference between NeRF and STF turntables (docs/findings/transmitter-small.md).
DEFAULT_DENSITY_SCALE = 1000.0
_MLP_PREFIX = "renderer.nerstf.mlp."


def _rows(head: str) -> slice:
    start, n, _ = HEADS[head]
    return slice(start, start + n)


@dataclass(frozen=True)
class NerfHeadSettings:
    """`nerf_heads:` of a transmitter training config: the density scale of the derived heads."""

    density_scale: float = DEFAULT_DENSITY_SCALE

    def __post_init__(self) -> None:
        value = self.density_scale
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError(f"nerf_heads: density_scale must be a finite number > 0, got {value!r}")


def derived_last_layer(
    weight: torch.Tensor, bias: torch.Tensor, settings: NerfHeadSettings = NerfHeadSettings()
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The last layer `weight [12, d_hidden]`, `bias [12]` with the NeRF rows written from the SDF and
    STF colour rows (new tensors; the other rows are the same values)."""
    if weight.shape[0] != N_OUTPUTS or bias.shape != (N_OUTPUTS,):
        raise ValueError(f"expected the last NeRSTF layer ([{N_OUTPUTS}, d] and [{N_OUTPUTS}]), got "
                         f"{tuple(weight.shape)} and {tuple(bias.shape)}")
    weight, bias = weight.clone(), bias.clone()
    sdf, color = _rows("sdf"), _rows("color_stf")
    for head in ("density_coarse", "density_fine"):
        weight[_rows(head)] = settings.density_scale * weight[sdf]
        bias[_rows(head)] = settings.density_scale * bias[sdf]
    for head in ("color_coarse", "color_fine"):
        weight[_rows(head)] = weight[color]
        bias[_rows(head)] = bias[color]
    return weight, bias


def derive_nerf_heads_in_state(state: Dict[str, torch.Tensor], settings: NerfHeadSettings) -> Dict[str, torch.Tensor]:
    """A Transmitter or decoder state dict with derived NeRF heads in its `renderer.nerstf` MLP."""
    layers = sorted(int(k.split(".")[-2]) for k in state if k.startswith(_MLP_PREFIX) and k.endswith(".weight"))
    if not layers:
        raise ValueError(f"nerf_heads: the weights have no NeRSTF MLP (no {_MLP_PREFIX}* entries)")
    name = f"{_MLP_PREFIX}{layers[-1]}"
    out = dict(state)
    out[f"{name}.weight"], out[f"{name}.bias"] = derived_last_layer(state[f"{name}.weight"], state[f"{name}.bias"], settings)
    return out
