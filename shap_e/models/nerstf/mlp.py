"""The NeRSTF field: one MLP whose first layers are generated from a latent (docs/behaviour.md#nerstf-mlp).

A point's raw output `o [12]` holds an SDF (`o[0]`), coarse and fine NeRF densities (`o[1]`,
`o[2]`), the STF texture colour (`o[3:6]`) and coarse/fine NeRF colours (`o[6:9]`, `o[9:12]`).
"""
import math
from typing import Dict, Iterable, Mapping, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.nn.encoding import encode_position, maybe_encode_direction, posenc_nerf
from shap_e.models.nn.ops import MetaLinear, swish
from shap_e.models.stf.mlp import run_mlp
from shap_e.rendering.fields import NeRSTFOutput
from shap_e.util.config import skip_weight_init

__all__ = ["HEADS", "NeRSTFOutput", "MetaLinear", "NeRSTFMLP"]

POSITION_FEATURES = 93


def position_features(degrees: int = 15) -> int:
    """Width of the NeRF position encoding with `degrees` frequencies (93 for the release's 15).

    Small models may use fewer: high frequencies make a narrow MLP's fields noisy early in training.
    """
    return 3 * (1 + 2 * degrees)
DIRECTION_FEATURES = 51

# Head name -> (first raw output channel, number of channels, activation).
HEADS: Dict[str, Tuple[int, int, str]] = {
    "sdf": (0, 1, "tanh"),
    "density_coarse": (1, 1, "relu"),
    "density_fine": (2, 1, "relu"),
    "color_stf": (3, 3, "sigmoid"),
    "color_coarse": (6, 3, "sigmoid"),
    "color_fine": (9, 3, "sigmoid"),
}
N_OUTPUTS = 12

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}


class NeRSTFMLP(nn.Module):
    """`MLPNeRSTFModel` of the release: 7 linears, swish, meta layers 0..n_meta_layers-1.

    State-dict keys: `mlp.{i}.weight/bias` for i = 0..n_hidden_layers (weights of the meta layers
    are buffers). Direction features (51, zeros without a direction) are concatenated before
    layer `insert_direction_at`.
    """

    def __init__(
        self,
        d_hidden: int = 256,
        n_hidden_layers: int = 6,
        n_meta_layers: int = 4,
        insert_direction_at: int = 4,
        init_scale: float = 0.25,
        initial_density_bias: float = 0.1,
        position_degrees: int = 15,
        device: Optional[torch.device] = None,
    ):
        super().__init__()
        if not 1 <= position_degrees <= 15:
            raise ValueError(f"position_degrees={position_degrees} must be in 1..15 (the release uses 15)")
        if not 0 < n_meta_layers <= insert_direction_at < n_hidden_layers:
            raise ValueError(
                "need 0 < n_meta_layers <= insert_direction_at < n_hidden_layers, got "
                f"{n_meta_layers}, {insert_direction_at}, {n_hidden_layers}"
            )
        self.d_hidden = d_hidden
        self.n_meta_layers = n_meta_layers
        self.insert_direction_at = insert_direction_at
        self.position_degrees = position_degrees
        d_ins = [position_features(position_degrees)] + [d_hidden] * n_hidden_layers
        d_ins[insert_direction_at] += DIRECTION_FEATURES
        d_outs = [d_hidden] * n_hidden_layers + [N_OUTPUTS]
        layers = []
        for i, (d_in, d_out) in enumerate(zip(d_ins, d_outs)):
            if i < n_meta_layers:
                # The weight comes from the latent: a meta buffer (kept in the checkpoint); the bias is trained.
                # Built without drawing random numbers, so that seeded training runs draw what they always
                # drew (`_init_weights` sets every weight).
                with skip_weight_init():
                    layers.append(MetaLinear(d_in, d_out, meta_scale=False, meta_shift=False, meta_proj=True,
                                             device=device))
            else:
                layers.append(nn.Linear(d_in, d_out, device=device))
        self.mlp = nn.ModuleList(layers)
        self._init_weights(init_scale, initial_density_bias)

    @torch.no_grad()
    def _init_weights(self, init_scale: float, initial_density_bias: float) -> None:
        # Training-time initialisation only; checkpoints overwrite every tensor.
        for layer in self.mlp:
            if layer.weight.is_meta:
                return
            std = init_scale / math.sqrt(layer.weight.shape[1])
            layer.weight.normal_(0.0, std)
            layer.bias.zero_()
        self.mlp[-1].bias[1:3] = initial_density_bias

    def meta_parameter_shapes(self) -> Dict[str, Tuple[int, int]]:
        """`{"mlp.{i}.weight": (d_out, d_in)}` for the weights the latent must supply."""
        return {f"mlp.{i}.weight": tuple(self.mlp[i].weight.shape) for i in range(self.n_meta_layers)}

    def query(
        self,
        position: torch.Tensor,
        params: Optional[Mapping[str, torch.Tensor]] = None,
        direction: Optional[torch.Tensor] = None,
        heads: Iterable[str] = ("sdf", "density_fine", "color_stf"),
    ) -> NeRSTFOutput:
        """Evaluate the requested heads at `position [batch, n_points, 3]`.

        params: `{"mlp.{i}.weight": [batch, d_out, d_in]}` for the meta layers (missing entries fall
            back to the stored buffers). direction: `[batch, n_points, 3]` unit vectors or None.
        """
        heads = tuple(heads)
        unknown = [h for h in heads if h not in HEADS]
        if unknown or not heads:
            raise ValueError(f"heads must be a non-empty subset of {sorted(HEADS)}, got {heads}")
        if position.ndim != 3 or position.shape[-1] != 3:
            raise ValueError(f"position must be [batch, n_points, 3], got {tuple(position.shape)}")
        params = {} if params is None else params
        # All 12 raw outputs are computed: the last layer is cheap, and a narrower matmul would
        # round differently from the reference; only the requested activations are applied.
        raw = self._forward(position, params, direction)
        out = NeRSTFOutput()
        for h in heads:
            start, width, activation = HEADS[h]
            setattr(out, h, _ACTIVATIONS[activation](raw[..., start:start + width]))
        return out

    def _forward(self, position, params, direction) -> torch.Tensor:
        """Raw outputs `[batch, n_points, 12]`."""
        if self.position_degrees == 15:
            h = encode_position("nerf", position=position)
        else:
            h = posenc_nerf(position, 0, self.position_degrees)

        def direction_features() -> torch.Tensor:
            # Zero direction features are concatenated rather than folded away: dropping their
            # weight columns changes the GEMM blocking (1e-8 at width 256) for a ~3% saving.
            return maybe_encode_direction("nerf", position=position, direction=direction)

        return run_mlp(self.mlp, h, params, swish, self.insert_direction_at, direction_features)[0]
