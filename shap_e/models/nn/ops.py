"""Official path `shap_e.models.nn.ops`, the home of the small building blocks: activations, weight
initialisations, `MetaLinear` / `MetaMLP` (layers whose weights may come per batch element from
`params`, docs/behaviour.md#nerstf-mlp), `MLP`, `LayerNorm`, shape helpers, and `PointSetEmbedding`, the
transmitter's point convolution (docs/behaviour.md#point-tokens).
"""
import math
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from shap_e.models.nn.meta import MetaModule, subdict
from shap_e.models.nn.pointnet2_utils import group_neighbourhoods
from shap_e.util.collections import AttrDict
from shap_e.util.rng import draw_device

__all__ = [
    "Conv", "LayerNorm", "MLP", "MetaLinear", "MetaMLP", "PointSetEmbedding", "SirenSin",
    "flatten", "geglu", "gelu", "get_act", "mlp_init", "quick_gelu", "siren_init", "siren_init_30",
    "siren_init_first_layer", "std_init", "swish", "torch_gelu", "torchify", "unflatten", "untorchify",
    "zero_init",
]


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016)."""
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def swish(x: torch.Tensor) -> torch.Tensor:
    """`x * sigmoid(x)`."""
    return x * torch.sigmoid(x)


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """`x * sigmoid(1.702 x)`, CLIP's GELU approximation."""
    return x * torch.sigmoid(1.702 * x)


def torch_gelu(x: torch.Tensor) -> torch.Tensor:
    """Exact GELU (`torch.nn.functional.gelu`)."""
    return F.gelu(x)


def geglu(x: torch.Tensor) -> torch.Tensor:
    """GEGLU (Shazeer 2020): the first half of the last axis gated by `gelu` of the second half."""
    value, gates = x.chunk(2, dim=-1)
    return value * gelu(gates)


class SirenSin:
    """`sin(w0 x)`, the SIREN activation (Sitzmann et al. 2020)."""

    def __init__(self, w0: float = 30.0):
        self.w0 = w0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.w0 * x)


_ACTIVATIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu, "leaky_relu": F.leaky_relu, "swish": swish, "tanh": torch.tanh, "gelu": gelu,
    "quick_gelu": quick_gelu, "torch_gelu": torch_gelu, "gelu2": quick_gelu, "geglu": geglu,
    "sigmoid": torch.sigmoid, "sin": torch.sin, "sin30": SirenSin(w0=30.0), "softplus": F.softplus,
    "exp": torch.exp, "identity": lambda x: x,
}


def get_act(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function called `name` (e.g. 'relu', 'swish', 'quick_gelu', 'identity')."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; valid: {sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def zero_init(affine: nn.Module) -> None:
    """Zero weight and bias."""
    nn.init.constant_(affine.weight, 0.0)
    if affine.bias is not None:
        nn.init.constant_(affine.bias, 0.0)


def _uniform_init(affine: nn.Module, bound: float) -> None:
    nn.init.uniform_(affine.weight, -bound, bound)
    if affine.bias is not None:
        nn.init.constant_(affine.bias, 0.0)


def siren_init_first_layer(affine: nn.Module, init_scale: float = 1.0) -> None:
    """SIREN first layer: weight ~ U(+-init_scale / n_in), zero bias."""
    _uniform_init(affine, init_scale / affine.weight.shape[1])


def siren_init(affine: nn.Module, coeff: float = 1.0, init_scale: float = 1.0) -> None:
    """SIREN hidden layer: weight ~ U(+-init_scale sqrt(6 / n_in) / coeff), zero bias."""
    _uniform_init(affine, init_scale * math.sqrt(6.0 / affine.weight.shape[1]) / coeff)


def siren_init_30(affine: nn.Module, init_scale: float = 1.0) -> None:
    """`siren_init` for `sin(30 x)` activations (coeff 30)."""
    siren_init(affine, coeff=30.0, init_scale=init_scale)


def std_init(affine: nn.Module, init_scale: float = 1.0) -> None:
    """Weight ~ N(0, (init_scale / sqrt(n_in))^2), zero bias."""
    nn.init.normal_(affine.weight, std=init_scale / math.sqrt(affine.weight.shape[1]))
    if affine.bias is not None:
        nn.init.constant_(affine.bias, 0.0)


def mlp_init(affines, init: Optional[str] = None, init_scale: float = 1.0) -> None:
    """Initialise a stack of layers: None -> `std_init` each; 'siren' / 'siren30' -> the SIREN first
    layer then `siren_init` / `siren_init_30`."""
    hidden = {None: std_init, "siren": siren_init, "siren30": siren_init_30}
    if init not in hidden:
        raise ValueError(f"unknown init {init!r}; valid: None, 'siren', 'siren30'")
    for index, affine in enumerate(affines):
        first = init is not None and index == 0
        (siren_init_first_layer if first else hidden[init])(affine, init_scale=init_scale)


class MetaLinear(MetaModule):
    """A linear layer `y = ((x W^T + bias) * scale) + shift` whose tensors may be meta.

    meta_proj / meta_bias make the weight / bias meta; meta_scale / meta_shift add meta `scale`
    (ones) and `shift` (zeros) of `[n_out]`. Meta tensors are buffers unless `trainable_meta`.
    `forward(x [batch, ..., n_in], params)` takes per-call tensors from `params` ('weight',
    'bias', 'scale', 'shift'): a weight `[n_out, n_in]` or per batch element `[batch, n_out, n_in]`,
    the others `[n_out]` or `[batch, n_out]`. kwargs (device, dtype) go to the tensors.
    """

    def __init__(self, n_in, n_out, bias: bool = True, meta_scale: bool = True, meta_shift: bool = True,
                 meta_proj: bool = False, meta_bias: bool = False, trainable_meta: bool = False, **kwargs):
        super().__init__()
        register_meta = self.register_meta_parameter if trainable_meta else self.register_meta_buffer
        if meta_scale:
            register_meta("scale", nn.Parameter(torch.ones(n_out, **kwargs)))
        if meta_shift:
            register_meta("shift", nn.Parameter(torch.zeros(n_out, **kwargs)))
        register_weight = register_meta if meta_proj else self.register_parameter
        register_weight("weight", nn.Parameter(torch.empty(n_out, n_in, **kwargs)))
        if bias:
            register_bias = register_meta if meta_bias else self.register_parameter
            register_bias("bias", nn.Parameter(torch.empty(n_out, **kwargs)))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """`nn.Linear`'s initialisation: weight and bias ~ U(+-1 / sqrt(n_in))."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, params: Optional[Dict[str, torch.Tensor]] = None) -> torch.Tensor:
        """`[batch, ..., n_in]` -> `[batch, ..., n_out]`."""
        batch, *shape, d_in = x.shape
        x = x.reshape(batch, -1, d_in)
        weight = self.meta_tensor(params, "weight")
        if weight.ndim not in (2, 3):
            raise ValueError(f"weight must be [n_out, n_in] or [batch, n_out, n_in], got {tuple(weight.shape)}")
        h = torch.matmul(x, weight.transpose(-1, -2))
        for name, op in (("bias", torch.add), ("scale", torch.mul), ("shift", torch.add)):
            value = self.meta_tensor(params, name)
            if value is not None:
                h = op(h, value.unsqueeze(1) if value.ndim == 2 else value)
        return h.reshape(batch, *shape, -1)


def Conv(n_dim, d_in, d_out, kernel, stride=1, padding=0, dilation=1, **kwargs) -> nn.Module:
    """`nn.Conv1d`, `nn.Conv2d` or `nn.Conv3d` for `n_dim` 1, 2 or 3."""
    classes = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
    if n_dim not in classes:
        raise ValueError(f"n_dim must be 1, 2 or 3, got {n_dim!r}")
    return classes[n_dim](d_in, d_out, kernel, stride=stride, padding=padding, dilation=dilation, **kwargs)


def flatten(x: torch.Tensor) -> Tuple[torch.Tensor, AttrDict]:
    """`[batch, *shape, channels]` -> `[batch, prod(shape), channels]` and the info `unflatten` needs."""
    batch, *shape, channels = x.shape
    n_ctx = math.prod(shape)
    return x.view(batch, n_ctx, channels), AttrDict(shape=shape, n_ctx=n_ctx, n_channels=channels)


def unflatten(x: torch.Tensor, info: AttrDict) -> torch.Tensor:
    """The inverse of `flatten`."""
    return x.view(x.shape[0], *info.shape, info.n_channels)


def torchify(x: torch.Tensor) -> torch.Tensor:
    """Channels last -> channels first: `[batch, *extent, channels]` -> `[batch, channels, *extent]`."""
    return x.permute(0, x.ndim - 1, *range(1, x.ndim - 1))


def untorchify(x: torch.Tensor) -> torch.Tensor:
    """Channels first -> channels last (the inverse of `torchify`)."""
    return x.permute(0, *range(2, x.ndim), 1)


class MLP(nn.Module):
    """Linear layers of widths `d_input -> *d_hidden -> d_output` with `act_name` between them,
    initialised by `mlp_init(init, init_scale)` (`zero_out`: a zero last layer)."""

    def __init__(self, d_input: int, d_hidden: List[int], d_output: int, act_name: str = "quick_gelu",
                 bias: bool = True, init: Optional[str] = None, init_scale: float = 1.0, zero_out: bool = False):
        super().__init__()
        self.d = [d_input, *d_hidden, d_output]
        self.affines = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(self.d[:-1], self.d[1:]))
        self.act = get_act(act_name)
        mlp_init(self.affines, init=init, init_scale=init_scale)
        if zero_out:
            zero_init(self.affines[-1])

    def forward(self, h: torch.Tensor, options: Optional[AttrDict] = None, log_prefix: str = "") -> torch.Tensor:
        """`[..., d_input]` -> `[..., d_output]`."""
        *hidden, last = self.affines
        for layer in hidden:
            h = self.act(layer(h))
        return last(h)


class MetaMLP(MetaModule):
    """`MLP` of `MetaLinear` layers (the meta_* flags as there); `forward(h, params)` reads layer i's
    tensors under `affines.{i}.` in `params`."""

    def __init__(self, d_input: int, d_hidden: List[int], d_output: int, act_name: str = "quick_gelu",
                 bias: bool = True, meta_scale: bool = True, meta_shift: bool = True, meta_proj: bool = False,
                 meta_bias: bool = False, trainable_meta: bool = False, init: Optional[str] = None,
                 init_scale: float = 1.0, zero_out: bool = False):
        super().__init__()
        self.d = [d_input, *d_hidden, d_output]
        flags = dict(bias=bias, meta_scale=meta_scale, meta_shift=meta_shift, meta_proj=meta_proj,
                     meta_bias=meta_bias, trainable_meta=trainable_meta)
        self.affines = nn.ModuleList(MetaLinear(a, b, **flags) for a, b in zip(self.d[:-1], self.d[1:]))
        self.act = get_act(act_name)
        mlp_init(self.affines, init=init, init_scale=init_scale)
        if zero_out:
            zero_init(self.affines[-1])

    def forward(self, h: torch.Tensor, params: Optional[Dict[str, torch.Tensor]] = None,
                options: Optional[AttrDict] = None, log_prefix: str = "") -> torch.Tensor:
        """`[batch, ..., d_input]` -> `[batch, ..., d_output]`."""
        params = self.update(params)
        last = len(self.affines) - 1
        for i, layer in enumerate(self.affines):
            h = layer(h, params=subdict(params, f"{log_prefix}affines.{i}"))
            if i < last:
                h = self.act(h)
        return h


class LayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` computed in float32 whatever the input dtype, returned in the input's dtype."""

    def __init__(self, norm_shape: Union[int, Tuple[int]], eps: float = 1e-5, elementwise_affine: bool = True,
                 device=None):
        super().__init__(norm_shape, eps=eps, elementwise_affine=elementwise_affine, device=device)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(input.float(), self.normalized_shape, self.weight, self.bias, self.eps).type_as(input)


class PointSetEmbedding(nn.Module):
    """Point tokens (docs/behaviour.md#point-tokens): the neighbourhood (ball of `radius`, `n_sample` points) of each of
    `n_point` centres (`fps_method` 'fps' or 'first'; `group_all`: one group of every point),
    convolved by strided `(patch_size, 1)` convolutions along the samples (`d_hidden` channels,
    `activation` after each), then averaged over the samples.

    With `patch_size > 1` the samples are shuffled before each convolution, independently per batch
    element and channel, in eval mode too: the reference's encoder is stochastic. The draws come from
    `generator` (default: the global RNG) in the reference's order. kwargs (device, dtype) go to the
    convolutions.
    """

    def __init__(self, *, radius: float, n_point: int, n_sample: int, d_input: int, d_hidden: List[int],
                 patch_size: int = 1, stride: int = 1, activation: str = "swish", group_all: bool = False,
                 padding_mode: str = "zeros", fps_method: str = "fps", **kwargs):
        super().__init__()
        self.n_point, self.radius, self.n_sample = n_point, radius, n_sample
        self.patch_size, self.stride = patch_size, stride
        self.group_all, self.fps_method = group_all, fps_method
        self.act = get_act(activation)
        channels = [d_input + 3, *d_hidden]
        self.mlp_convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, kernel_size=(patch_size, 1), stride=(stride, 1), padding=(patch_size // 2, 0),
                      padding_mode=padding_mode, **kwargs)
            for c_in, c_out in zip(channels[:-1], channels[1:])
        )

    def forward(self, xyz: torch.Tensor, points: Optional[torch.Tensor],
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, 3, n]` coordinates and `[batch, d_input, n]` features -> `[batch, d_hidden[-1], n_point]`."""
        _, grouped = group_neighbourhoods(xyz, points, self.n_point, self.radius, self.n_sample, self.group_all,
                                          deterministic=not self.training, fps_method=self.fps_method,
                                          generator=generator)
        h = grouped.permute(0, 3, 2, 1)  # [batch, channels, n_sample, n_point]
        for conv in self.mlp_convs:
            h = self.act(self.apply_conv(h, conv, generator))
        return h.mean(dim=2)

    def apply_conv(self, points: torch.Tensor, conv: nn.Module, generator: Optional[torch.Generator] = None):
        """`conv` of `points [batch, channels, n_sample, n_point]`, its samples shuffled first when `patch_size > 1`."""
        if self.patch_size > 1:
            batch, channels, n_samples, _ = points.shape
            noise = torch.rand(batch, channels, n_samples, 1, generator=generator,
                               device=draw_device(generator, points.device)).to(points.device)
            order = torch.argsort(noise, dim=2)
            points = torch.gather(points, 2, order.expand_as(points))
        return conv(points)
