"""Gradient checkpointing gives the gradients (first and second order) of the plain computation."""
import torch

from shap_e.models.nn.checkpoint import checkpoint


def _setup():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4, requires_grad=True)

    def func(h):
        return torch.tanh(layer(h)) ** 2, layer(h).sum(dim=-1)

    return layer, x, func


def test_checkpointed_gradients_equal_the_plain_ones_for_inputs_and_params():
    layer, x, func = _setup()
    plain = sum(o.sum() for o in func(x))
    plain_grads = torch.autograd.grad(plain, [x, layer.weight, layer.bias])
    outputs = checkpoint(func, (x,), list(layer.parameters()), True)
    assert all(o.grad_fn is not None for o in outputs)
    for a, b in zip(outputs, func(x)):
        torch.testing.assert_close(a, b)
    grads = torch.autograd.grad(sum(o.sum() for o in outputs), [x, layer.weight, layer.bias])
    for a, b in zip(grads, plain_grads):
        torch.testing.assert_close(a, b)


def test_checkpointed_second_derivatives_equal_the_plain_ones():
    layer, x, func = _setup()

    def grad_norm(flag):
        out = checkpoint(func, (x,), list(layer.parameters()), flag)
        (gx,) = torch.autograd.grad(out[0].sum(), [x], create_graph=True)
        return torch.autograd.grad((gx**2).sum(), [x, layer.weight])

    for a, b in zip(grad_norm(True), grad_norm(False)):
        torch.testing.assert_close(a, b)


def test_without_the_flag_the_function_runs_as_is():
    layer, x, func = _setup()
    out = checkpoint(lambda h: layer(h), (x,), [], False)
    assert torch.equal(out, layer(x))
