"""int8 inference for the priors' transformers on the CPU: a transformation of a built model.

`quantize_int8(model)` swaps every `nn.Linear` inside the model's `Transformer` stacks (attention
`c_qkv`/`c_proj`, MLP `c_fc`/`c_proj`: about 98 % of a text300M forward's multiply-adds) for an
`Int8Linear`: weights rounded once to int8 with one scale per output channel; activations quantised
at run time with one scale per token (row); the product runs in torch's own quantised kernels
(`torch.ops.quantized.linear_dynamic`: FBGEMM or oneDNN, with VNNI where the CPU has it). The input
and output projections, the time and conditioning embeddings and the LayerNorms stay float32.

Selected with `load_model(..., precision="int8")` or `shap-e text --precision int8`, never by
default: it is approximate (errors and speed in docs/performance.md) and CPU only.
"""
import warnings
from typing import Iterator, Optional, Tuple

import torch
import torch.nn as nn

__all__ = ["PRECISIONS", "Int8Linear", "apply_precision", "check_precision", "int8_available", "quantize_int8"]

PRECISIONS = ("float32", "int8")
# Activations keep 7 bits: FBGEMM's AVX2 kernels add pairs of u8 x s8 products in int16, which a
# full 8-bit range can overflow (torch's own x86 dynamic-quantisation default does the same).
REDUCE_RANGE = True
_TINY = 1e-12


def int8_available() -> bool:
    """Whether this torch build has a CPU quantisation engine (FBGEMM/x86/oneDNN) for `Int8Linear`."""
    return any(engine in torch.backends.quantized.supported_engines for engine in ("x86", "fbgemm", "onednn"))


def check_precision(precision: Optional[str], device, what: str = "precision") -> str:
    """The validated precision name (`None` means "float32"); `int8` needs a CPU device and an engine."""
    precision = "float32" if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"{what}={precision!r} is unknown; use one of {', '.join(PRECISIONS)}")
    if precision == "int8":
        if torch.device(device if device is not None else "cpu").type != "cpu":
            raise ValueError(f"{what}='int8' runs on the CPU only (torch's quantised kernels); on {device} leave "
                             "it at 'float32' and use a half-precision dtype instead")
        if not int8_available():
            raise ValueError(f"{what}='int8' needs torch's CPU quantisation engine (fbgemm/x86/onednn), which this "
                             f"torch build lacks (engines: {torch.backends.quantized.supported_engines})")
    return precision


class Int8Linear(nn.Module):
    """`y = x W^T + b` with `W` in int8 (one scale per output channel) and `x` quantised per row.

    Each row of `x` is divided by its largest magnitude before torch's dynamic kernel, which then
    quantises with one scale for the whole tensor: together, a scale per row (per token), so one
    token with large activations does not coarsen the others. The row scale is multiplied back and
    the float32 bias added after the int32 product. Inference only: the packed weight is not a
    parameter (no gradients, not in `state_dict()`), and it lives on the CPU.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float().cpu()
        scale = weight.abs().amax(dim=1).clamp_min(_TINY) / 127.0  # [out_features]
        with warnings.catch_warnings():
            # torch >= 2.10 flags its quantised tensor types as deprecated (pytorch#184982); they are
            # the only CPU int8 GEMM this torch has, and check_precision reports a build without them.
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            qweight = torch.quantize_per_channel(
                weight, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(qweight, None)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float().cpu(),
                                                                  requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., in_features]` -> `[..., out_features]`, float32 (the input's dtype when it is a float type)."""
        rows = x.reshape(-1, self.in_features).float()
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp_min(_TINY)  # [n, 1]
        out = torch.ops.quantized.linear_dynamic(rows / row_scale, self._packed, REDUCE_RANGE)  # [n, out]
        # In place: a fresh [n, out] buffer per layer costs as much as the int8 product saves.
        if self.bias is None:
            out.mul_(row_scale)
        else:
            torch.addcmul(self.bias, out, row_scale, out=out)
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel weights"


def _transformer_linears(model: nn.Module) -> Iterator[Tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, linear) for every `nn.Linear` inside a `Transformer` stack of `model`."""
    from shap_e.models.generation.transformer import Transformer

    stacks = [module for module in model.modules() if isinstance(module, Transformer)]
    for stack in stacks:
        for parent in stack.modules():
            for name, child in parent.named_children():
                if type(child) is nn.Linear:
                    yield parent, name, child


def quantize_int8(model: nn.Module) -> nn.Module:
    """Swap the linears of `model`'s transformer stacks for `Int8Linear`, in place; returns `model`.

    The model must be on the CPU. Apply it to a model in eval mode for inference: the swapped
    layers have no gradients. Raises a ValueError when the model has no transformer stack.
    """
    check_precision("int8", next(model.parameters()).device, "quantize_int8: the model's device; precision")
    targets = list(_transformer_linears(model))
    if not targets:
        raise ValueError(f"{type(model).__name__} has no transformer stack (shap_e.models.generation.transformer."
                         "Transformer) whose linears int8 could replace")
    for parent, name, linear in targets:
        setattr(parent, name, Int8Linear(linear))
    _own_memory(model)
    return model


def _own_memory(model: nn.Module) -> None:
    """Give every remaining parameter and buffer memory of its own.

    A memory-mapped checkpoint (`shap_e.models.weights_io`) stays mapped, and the pages read from it
    stay resident, while any tensor of it lives: copying the few float32 tensors left after the swap
    lets the float32 weights that int8 replaced leave memory.
    """
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()


def apply_precision(model: nn.Module, precision: Optional[str]) -> nn.Module:
    """`model` as loaded for `precision` ("float32": unchanged; "int8": `quantize_int8`)."""
    if check_precision(precision, next(model.parameters()).device) == "int8":
        quantize_int8(model)
    return model
