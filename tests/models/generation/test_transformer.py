"""shap_e/models/generation/transformer.py: the per-head interleaved q/k/v split and its gradient."""
import torch

from shap_e.models.generation.transformer import split_heads


def test_split_heads_takes_head_major_parts():
    batch, n_ctx, heads, parts, d = 2, 5, 3, 3, 4
    x = torch.arange(batch * n_ctx * heads * parts * d, dtype=torch.float32).view(batch, n_ctx, -1)
    out = split_heads(x, heads, parts)
    assert len(out) == parts
    for i, part in enumerate(out):
        assert part.shape == (batch, heads, n_ctx, d)
        for j in range(heads):
            start = (j * parts + i) * d
            assert torch.equal(part[:, j], x[..., start:start + d])


def test_split_heads_gradient_equals_the_slices_gradient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 3 * 2 * 8, generator=g, requires_grad=True)
    weights = [torch.randn(2, 3, 7, 8, generator=g) for _ in range(2)]
    k, v = split_heads(x, 3, 2)
    (grad,) = torch.autograd.grad((k * weights[0]).sum() + (v * weights[1]).sum(), x)
    reference = torch.zeros(2, 7, 3, 2, 8)
    for i in range(2):
        reference[:, :, :, i] = weights[i].transpose(1, 2)
    assert torch.equal(grad, reference.view(2, 7, -1))
