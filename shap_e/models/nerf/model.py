"""Official module path `shap_e.models.nerf.model`: NeRF field models with AttrDict outputs.

A NeRF model maps a `shap_e.models.query.Query` (positions `[batch, ..., 3]`, optional unit
directions) to an AttrDict with at least `density [..., 1]` and `channels [..., C]`, which
`shap_e.models.nerf.ray` integrates along rays. `MLPNeRFModel` is the plain NeRF MLP (density from
the position, colour from density features and the view direction's spherical harmonics);
`VoidNeRFModel` is the constant background seen where rays leave every volume. The positional
encodings and the harmonics are `shap_e.models.nn.encoding`'s.
"""
from abc import ABC, abstractmethod
from functools import partial
from typing import Iterable, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from shap_e.models.nn.checkpoint import checkpoint
from shap_e.models.nn.encoding import encode_position, spherical_harmonics_basis
from shap_e.models.nn.meta import MetaModule, subdict
from shap_e.models.nn.ops import MLP, MetaMLP, get_act, mlp_init
from shap_e.models.query import Query
from shap_e.util.collections import AttrDict

__all__ = ["MLPNeRFModel", "NeRFModel", "VoidNeRFModel", "maybe_get_spherical_harmonics_basis"]


class NeRFModel(ABC):
    """A field for volume rendering: `forward(query, params, options) -> AttrDict(density, channels, ...)`."""

    @abstractmethod
    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> AttrDict:
        """`density [batch, ..., 1]` (non-negative) and `channels [batch, ..., C]` at `query.position`."""


class VoidNeRFModel(MetaModule, NeRFModel):
    """The background: one colour everywhere, `background / channel_scale` (a buffer, or a
    parameter when `trainable`)."""

    def __init__(
        self,
        background: Union[np.ndarray, Iterable[int], torch.Tensor],
        trainable: bool = False,
        channel_scale: float = 255.0,
        device: Optional[torch.device] = None,
    ):
        super().__init__()
        value = background if isinstance(background, torch.Tensor) else torch.from_numpy(np.array(background))
        value = value.to(dtype=torch.float32, device=device) / channel_scale
        if value.ndim != 1:
            raise ValueError(f"background must be one colour (a 1-d sequence), got shape {tuple(value.shape)}")
        if trainable:
            self.register_parameter("background", nn.Parameter(value))
        else:
            self.register_buffer("background", value)

    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> torch.Tensor:
        """The background colour `[batch, ..., C]` at every query point."""
        background = self.meta_tensor(params, "background")
        return background.to(query.position).expand(*query.position.shape[:-1], background.shape[-1])


def maybe_get_spherical_harmonics_basis(
    sh_degree: int,
    coords_shape: Tuple[int, ...],
    coords: Optional[torch.Tensor] = None,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Spherical harmonics of the unit vectors `coords [..., 3]` -> `[..., sh_degree^2]`, or zeros
    of that width for `coords_shape [..., 3]` when there are no coords."""
    if coords is None:
        return torch.zeros(*coords_shape[:-1], sh_degree**2, device=device)
    return spherical_harmonics_basis(coords, sh_degree)


class MLPNeRFModel(MetaModule, NeRFModel):
    """The NeRF MLP: `density_mlp` (encoded position -> `d_hidden` features, the first of which is
    the density logit), then `channel_mlp` (features + degree-`sh_degree` harmonics of the view
    direction -> `n_channels`). With `meta_parameters`, every weight and bias may come from
    `params` (`density_mlp.affines.{i}.weight`, ...)."""

    def __init__(
        self,
        n_levels: int = 10,
        d_hidden: int = 256,
        n_density_layers: int = 4,
        n_channel_layers: int = 1,
        n_channels: int = 3,
        sh_degree: int = 4,
        activation: str = "relu",
        density_activation: str = "exp",
        init: Optional[str] = None,
        init_scale: float = 1.0,
        output_activation: str = "sigmoid",
        meta_parameters: bool = False,
        trainable_meta: bool = False,
        zero_out: bool = True,
        register_freqs: bool = True,
        posenc_version: str = "v1",
        device: Optional[torch.device] = None,
    ):
        super().__init__()
        if register_freqs:  # kept for the checkpoints' keys; the encodings compute their own
            self.register_buffer("freqs", 2.0 ** torch.arange(n_levels, dtype=torch.float32).view(1, n_levels))
        self.posenc_version, self.sh_degree, self.meta_parameters = posenc_version, sh_degree, meta_parameters
        d_input = encode_position(posenc_version, position=torch.zeros(1, 3)).shape[-1]
        mlp = MLP
        if meta_parameters:
            mlp = partial(MetaMLP, meta_scale=False, meta_shift=False, meta_proj=True, meta_bias=True,
                          trainable_meta=trainable_meta)
        self.density_mlp = mlp(d_input=d_input, d_hidden=[d_hidden] * (n_density_layers - 1), d_output=d_hidden,
                               act_name=activation, init_scale=init_scale)
        self.channel_mlp = mlp(d_input=d_hidden + sh_degree**2, d_hidden=[d_hidden] * n_channel_layers,
                               d_output=n_channels, act_name=activation, init_scale=init_scale)
        mlp_init([*self.density_mlp.affines, *self.channel_mlp.affines], init=init, init_scale=init_scale)
        if zero_out:
            nn.init.zeros_(self.channel_mlp.affines[-1].weight)
            nn.init.zeros_(self.channel_mlp.affines[-1].bias)
        self.act, self.density_act = get_act(output_activation), get_act(density_activation)
        self.to(device)

    def encode_position(self, query: Query) -> torch.Tensor:
        """The positional encoding of `query.position`."""
        return encode_position(self.posenc_version, position=query.position)

    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> AttrDict:
        """AttrDict(density_logit, density `[..., 1]`, channels `[..., n_channels]`) at the query points;
        `options.return_h_density` adds the density features, `options.checkpoint_nerf_mlp`
        checkpoints the MLPs."""
        options = AttrDict() if options is None else AttrDict(options)
        density_mlp, channel_mlp = self._mlps(params)
        flag = bool(options.get("checkpoint_nerf_mlp", False))
        h_density = checkpoint(density_mlp, (self.encode_position(query),), self._tensors("density_mlp", params), flag)
        h_direction = maybe_get_spherical_harmonics_basis(
            self.sh_degree, query.position.shape, query.direction, query.position.device
        )
        h_channel = checkpoint(
            channel_mlp, (torch.cat([h_density, h_direction], dim=-1),), self._tensors("channel_mlp", params), flag
        )
        density_logit = h_density[..., :1]
        out = AttrDict(density_logit=density_logit, density=self.density_act(density_logit), channels=self.act(h_channel))
        if options.get("return_h_density", False):
            out.h_density = h_density
        return out

    def _mlps(self, params):
        if not self.meta_parameters:
            return self.density_mlp, self.channel_mlp
        params = self.update(params)
        return (partial(self.density_mlp, params=subdict(params, "density_mlp")),
                partial(self.channel_mlp, params=subdict(params, "channel_mlp")))

    def _tensors(self, name: str, params) -> list:
        """The tensors one MLP computes with (for checkpointing): given ones where meta."""
        if self.meta_parameters:
            return list(subdict(self.update(params), name).values())
        return list(getattr(self, name).parameters())
