"""Latent -> NeRSTF MLP weights, one latent token per weight row (docs/behaviour.md#latent-to-mlp-weights)."""
import math
from collections import OrderedDict
from typing import Dict, Mapping, Tuple

import torch
import torch.nn as nn

from shap_e.models.generation.transformer import is_meta

ParamShapes = Mapping[str, Tuple[int, int]]


def module_key(param_name: str) -> str:
    """`nerstf.mlp.0.weight` -> `nerstf__mlp__0__weight` (dots are not allowed in module names)."""
    return param_name.replace(".", "__")


class ChannelProjection(nn.Module):
    """Maps `[batch, rows, d_latent]` tokens to a `[batch, rows, cols]` weight matrix.

    Token `v` has its own projection `proj.weight.view(rows, cols, d_latent)[v]`; the result is
    LayerNorm-ed over `cols` and offset by `proj.bias.view(rows, cols)`.
    """

    def __init__(self, rows: int, cols: int, d_latent: int, init_scale: float, learned_scale: float, device=None):
        super().__init__()
        self.rows, self.cols = rows, cols
        self.proj = nn.Linear(d_latent, rows * cols, device=device)
        self.norm = nn.LayerNorm(cols, device=device)
        if not is_meta(device):
            nn.init.normal_(self.proj.weight, std=init_scale / math.sqrt(d_latent))
            nn.init.zeros_(self.proj.bias)
            nn.init.constant_(self.norm.weight, learned_scale)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        weight = self.proj.weight.view(self.rows, self.cols, -1)
        h = torch.einsum("bvk,vck->bvc", tokens, weight)
        return self.norm(h) + self.proj.bias.view(self.rows, self.cols)


class ChannelsParamsProj(nn.Module):
    """All meta-parameters of the NeRSTF MLP from one `[batch, latent_ctx, d_latent]` latent."""

    def __init__(
        self,
        *,
        param_shapes: ParamShapes,
        d_latent: int,
        init_scale: float = 1.0,
        learned_scale: float = 0.0625,
        use_ln: bool = True,
        device=None,
    ):
        super().__init__()
        if not use_ln:
            raise ValueError("params_proj.use_ln=False is not supported; the release uses use_ln: true")
        self.param_shapes = OrderedDict(param_shapes)
        self.d_latent = d_latent
        self.projections = nn.ModuleDict(
            {
                module_key(name): ChannelProjection(rows, cols, d_latent, init_scale, learned_scale, device)
                for name, (rows, cols) in self.param_shapes.items()
            }
        )

    @property
    def latent_ctx(self) -> int:
        return sum(rows for rows, _ in self.param_shapes.values())

    def forward(self, latent: torch.Tensor) -> Dict[str, torch.Tensor]:
        """`[batch, latent_ctx * d_latent]` (token-major) -> `{name: [batch, rows, cols]}`."""
        expected = self.latent_ctx * self.d_latent
        if latent.dim() != 2 or latent.shape[1] != expected:
            raise ValueError(
                f"latent must have shape [batch, {expected}] (= {self.latent_ctx} tokens x {self.d_latent}), "
                f"got {list(latent.shape)}"
            )
        tokens = latent.view(latent.shape[0], self.latent_ctx, self.d_latent)
        params, start = {}, 0
        for name, (rows, _) in self.param_shapes.items():
            params[name] = self.projections[module_key(name)](tokens[:, start : start + rows])
            start += rows
        return params
