"""Gradient checkpointing (official path): run a function without keeping its activations and run it
again in the backward pass. Unlike `torch.utils.checkpoint`, the parameters the function closes over
are passed explicitly, so their gradients are computed too, and second derivatives work.
"""
from typing import Callable, Iterable, Sequence, Union

import torch

__all__ = ["CheckpointFunction", "CheckpointFunctionGradFunction", "checkpoint"]

Outputs = Union[torch.Tensor, Sequence[torch.Tensor]]


def checkpoint(
    func: Callable[..., Outputs],
    inputs: Sequence[torch.Tensor],
    params: Iterable[torch.Tensor],
    flag: bool,
) -> Outputs:
    """`func(*inputs)`, checkpointed when `flag` is true.

    params: the tensors `func` uses without taking them as arguments (e.g. module parameters);
        they receive gradients as usual.
    """
    if not flag:
        return func(*inputs)
    inputs = tuple(inputs)
    return CheckpointFunction.apply(func, len(inputs), *inputs, *params)


def _as_tuple(outputs: Outputs) -> tuple:
    if isinstance(outputs, torch.Tensor):
        return (outputs,)
    return tuple(outputs)


class CheckpointFunction(torch.autograd.Function):
    """forward(ctx, run_function, n_inputs, *inputs_then_params): `run_function(*inputs)` without a
    graph; backward: the gradients, computed by `CheckpointFunctionGradFunction` (itself differentiable)."""

    @staticmethod
    def forward(ctx, run_function, length, *args):
        ctx.run_function = run_function
        ctx.length = length
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return run_function(*args[:length])

    @staticmethod
    def backward(ctx, *output_grads):
        args = ctx.saved_tensors
        grads = CheckpointFunctionGradFunction.apply(
            ctx.run_function, ctx.length, len(args) - ctx.length, *args, *output_grads
        )
        return (None, None) + _as_tuple(grads)


class CheckpointFunctionGradFunction(torch.autograd.Function):
    """forward(ctx, run_function, n_inputs, n_params, *inputs, *params, *output_grads): the gradients
    of `run_function`'s outputs w.r.t. inputs and params (by recomputation); backward: their
    derivatives, for double backward."""

    @staticmethod
    def forward(ctx, run_function, length_1, length_2, *args):
        ctx.run_function, ctx.length_1, ctx.length_2 = run_function, length_1, length_2
        ctx.save_for_backward(*args)
        inputs, params, output_grads = _split(args, length_1, length_2)
        with torch.enable_grad():
            outputs = _as_tuple(run_function(*[x.view_as(x) for x in inputs]))
        return _grads(outputs, inputs + params, output_grads, create_graph=False)

    @staticmethod
    def backward(ctx, *grad_grads):
        inputs, params, output_grads = _split(ctx.saved_tensors, ctx.length_1, ctx.length_2)
        output_grads = [g.detach().requires_grad_(True) for g in output_grads]
        with torch.enable_grad():
            # view_as: a function that modifies its input in place must not touch the detached leaf.
            outputs = _as_tuple(ctx.run_function(*[x.view_as(x) for x in inputs]))
            grads = _grads(outputs, inputs + params, output_grads, create_graph=True)
        wrt = [t for t in inputs + params + output_grads if t.requires_grad]
        used = [(g, gg) for g, gg in zip(grads, grad_grads) if g is not None and g.requires_grad and gg is not None]
        second = ()
        if used:
            second = torch.autograd.grad([g for g, _ in used], wrt, [gg for _, gg in used], allow_unused=True)
        by_tensor = dict(zip(map(id, wrt), second))
        return (None, None, None) + tuple(by_tensor.get(id(t)) for t in inputs + params + output_grads)


def _split(args, length_1: int, length_2: int):
    """(inputs as fresh leaves that take gradients, params, output gradients) of the packed arguments."""
    inputs = [x.detach().requires_grad_(x.is_floating_point()) for x in args[:length_1]]
    params = list(args[length_1 : length_1 + length_2])
    return inputs, params, list(args[length_1 + length_2 :])


def _grads(outputs, wrt, output_grads, create_graph: bool):
    """`d outputs / d wrt` contracted with `output_grads` (None for tensors that do not need or get a gradient)."""
    needed = [t for t in wrt if t.requires_grad]
    pairs = [(o, g) for o, g in zip(outputs, output_grads) if o.requires_grad]
    if not needed or not pairs:
        return tuple(None for _ in wrt)
    grads = torch.autograd.grad(
        [o for o, _ in pairs], needed, [g for _, g in pairs], allow_unused=True, create_graph=create_graph
    )
    by_tensor = dict(zip(map(id, needed), grads))
    return tuple(by_tensor.get(id(t)) for t in wrt)
