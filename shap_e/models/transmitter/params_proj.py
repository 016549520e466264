"""Latent -> renderer weights ("params projections", docs/behaviour.md#latent-to-mlp-weights).

Real home of the official `shap_e.models.transmitter.params_proj`. The release uses `channels`: one
latent token per weight row (`ChannelsParamsProj`); `linear` and `mlp` map one latent vector to
every weight at once. Outputs are `AttrDict`s `{param name: [batch, *shape]}`.
"""
import math
from collections import OrderedDict
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.util.collections import AttrDict
from shap_e.util.config import check_keys

__all__ = [
    "ChannelsParamsProj", "ChannelsProj", "LinearParamsProj", "MLPParamsProj", "ParamShapes", "ParamsProj",
    "flatten_param_shapes", "module_key", "params_proj_from_config",
]

ParamShapes = Mapping[str, Tuple[int, ...]]


def module_key(param_name: str) -> str:
    """`nerstf.mlp.0.weight` -> `nerstf__mlp__0__weight` (dots are not allowed in module names)."""
    return param_name.replace(".", "__")


def flatten_param_shapes(param_shapes: ParamShapes) -> "OrderedDict[str, Tuple[int, int]]":
    """Each shape as `(vectors, channels)`: all leading dimensions as rows, the last as columns."""
    return OrderedDict((name, (math.prod(shape) // shape[-1], shape[-1])) for name, shape in param_shapes.items())


class ParamsProj(nn.Module):
    """Base of the projections: the target `param_shapes` and the latent width `d_latent`."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes, d_latent: int):
        super().__init__()
        self.device = device
        self.param_shapes = OrderedDict((name, tuple(shape)) for name, shape in param_shapes.items())
        self.d_latent = d_latent

    def _numel(self, name: str) -> int:
        return math.prod(self.param_shapes[name])

    def _per_param(self, x: torch.Tensor) -> AttrDict:
        """`[batch, d_latent]` through each `projections[name]`, reshaped to the parameter's shape."""
        if x.dim() != 2 or x.shape[1] != self.d_latent:
            raise ValueError(f"the latent must be [batch, {self.d_latent}] (d_latent), got {list(x.shape)}")
        return AttrDict({name: self.projections[module_key(name)](x).reshape(len(x), *shape)
                         for name, shape in self.param_shapes.items()})


class LinearParamsProj(ParamsProj):
    """One linear map from the latent vector to every parameter; `init_scale` sets weights to
    `N(0, (init_scale / sqrt(d_latent))^2)` and zero biases (None: PyTorch's default init)."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes, d_latent: int,
                 init_scale: Optional[float] = None):
        super().__init__(device=device, param_shapes=param_shapes, d_latent=d_latent)
        self.projections = nn.ModuleDict()
        for name in self.param_shapes:
            layer = nn.Linear(d_latent, self._numel(name), device=device)
            if init_scale is not None:
                nn.init.normal_(layer.weight, std=init_scale / math.sqrt(d_latent))
                nn.init.zeros_(layer.bias)
            self.projections[module_key(name)] = layer

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """`[batch, d_latent]` -> `{name: [batch, *shape]}`."""
        return self._per_param(x)


class MLPParamsProj(ParamsProj):
    """Per parameter, Linear(d_latent -> hidden_size), GELU, Linear(-> numel); hidden_size defaults to d_latent."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes, d_latent: int,
                 hidden_size: Optional[int] = None):
        super().__init__(device=device, param_shapes=param_shapes, d_latent=d_latent)
        hidden = d_latent if hidden_size is None else hidden_size
        self.projections = nn.ModuleDict({
            module_key(name): nn.Sequential(nn.Linear(d_latent, hidden, device=device), nn.GELU(),
                                            nn.Linear(hidden, self._numel(name), device=device))
            for name in self.param_shapes
        })

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """`[batch, d_latent]` -> `{name: [batch, *shape]}`."""
        return self._per_param(x)


class ChannelsProj(nn.Module):
    """Maps `[batch, vectors, d_latent]` tokens to a `[batch, vectors, channels]` weight matrix.

    Token `v` has its own projection `proj.weight.view(vectors, channels, d_latent)[v]`; the result is
    LayerNorm-ed over `channels` (`use_ln`; `learned_scale` initialises the norm's weight), or scaled
    by a learned per-channel `gain` (initialised to `learned_scale`), then offset by
    `proj.bias.view(vectors, channels)`.
    """

    def __init__(self, *, device: Optional[torch.device] = None, vectors: int, channels: int, d_latent: int,
                 init_scale: float = 1.0, learned_scale: Optional[float] = None, use_ln: bool = False):
        super().__init__()
        self.vectors, self.channels, self.d_latent = vectors, channels, d_latent
        self.use_ln, self.learned_scale = use_ln, learned_scale
        self.proj = nn.Linear(d_latent, vectors * channels, device=device)
        std = init_scale / math.sqrt(d_latent)
        if use_ln:
            self.norm = nn.LayerNorm(channels, device=device)
            if learned_scale is not None:
                nn.init.constant_(self.norm.weight, learned_scale)
        elif learned_scale is not None:
            self.gain = nn.Parameter(torch.empty(channels, device=device))
            nn.init.constant_(self.gain, learned_scale)
        else:  # no normalisation: keep the output variance independent of the width
            std = init_scale / math.sqrt(d_latent * channels)
        nn.init.normal_(self.proj.weight, std=std)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[batch, vectors, d_latent]` -> `[batch, vectors, channels]`."""
        weight = self.proj.weight.view(self.vectors, self.channels, self.d_latent)
        h = torch.einsum("bvd,vcd->bvc", x, weight)
        if self.use_ln:
            h = self.norm(h)
        elif self.learned_scale is not None:
            h = h * self.gain
        return h + self.proj.bias.view(self.vectors, self.channels)


class ChannelsParamsProj(ParamsProj):
    """All parameters from one `[batch, latent_ctx, d_latent]` latent: consecutive tokens, one
    `ChannelsProj` per parameter (`latent_ctx` = the total number of rows)."""

    def __init__(self, *, device: Optional[torch.device] = None, param_shapes: ParamShapes, d_latent: int,
                 init_scale: float = 1.0, learned_scale: Optional[float] = None, use_ln: bool = False):
        super().__init__(device=device, param_shapes=param_shapes, d_latent=d_latent)
        self.flat_shapes = flatten_param_shapes(self.param_shapes)
        self.learned_scale, self.use_ln = learned_scale, use_ln
        self.projections = nn.ModuleDict({
            module_key(name): ChannelsProj(device=device, vectors=vectors, channels=channels, d_latent=d_latent,
                                           init_scale=init_scale, learned_scale=learned_scale, use_ln=use_ln)
            for name, (vectors, channels) in self.flat_shapes.items()
        })

    @property
    def latent_ctx(self) -> int:
        return sum(vectors for vectors, _ in self.flat_shapes.values())

    def forward(self, x: torch.Tensor, options: Optional[AttrDict] = None) -> AttrDict:
        """`[batch, latent_ctx, d_latent]` tokens (or the flat token-major `[batch, latent_ctx *
        d_latent]` vector) -> `{name: [batch, *shape]}`."""
        expected = (self.latent_ctx, self.d_latent)
        if x.dim() == 2 and x.shape[1] == math.prod(expected):
            x = x.view(len(x), *expected)
        if x.dim() != 3 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"latent must have shape [batch, {math.prod(expected)}] or [batch, {expected[0]}, {expected[1]}] "
                f"(= {expected[0]} tokens x {expected[1]}), got {list(x.shape)}"
            )
        out, start = AttrDict(), 0
        for name, (vectors, _) in self.flat_shapes.items():
            h = self.projections[module_key(name)](x[:, start : start + vectors])
            out[name] = h.reshape(len(x), *self.param_shapes[name])
            start += vectors
        return out


PARAMS_PROJS = {"linear": LinearParamsProj, "mlp": MLPParamsProj, "channels": ChannelsParamsProj}
_OPTIONS = {"linear": {"init_scale"}, "mlp": {"hidden_size"}, "channels": {"init_scale", "learned_scale", "use_ln"}}


def params_proj_from_config(config: Dict[str, Any], device: Optional[torch.device], param_shapes: ParamShapes,
                            d_latent: int) -> ParamsProj:
    """The projection named by `config["name"]` (`linear`, `mlp` or `channels`) with the rest of
    `config` as its options. `config` is not modified."""
    options = dict(config)
    name = options.pop("name", None)
    if name not in PARAMS_PROJS:
        raise ValueError(f"unknown params_proj name {name!r}; valid names: {sorted(PARAMS_PROJS)}")
    check_keys(options, _OPTIONS[name], f"params_proj ({name})")
    return PARAMS_PROJS[name](device=device, param_shapes=param_shapes, d_latent=d_latent, **options)
