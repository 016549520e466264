"""Building blocks: activations, initialisations, meta layers, MLPs, shape helpers, LayerNorm and
the transmitter's point convolution (its golden outputs are in tests/models/transmitter/test_transmitter_golden.py)."""
import math

import pytest
import torch
import torch.nn as nn

from shap_e.models.nn import ops


def test_activations_follow_their_formulas():
    x = torch.linspace(-4, 4, 81, dtype=torch.float64)
    torch.testing.assert_close(ops.swish(x), x / (1 + torch.exp(-x)))
    torch.testing.assert_close(ops.quick_gelu(x), x / (1 + torch.exp(-1.702 * x)))
    torch.testing.assert_close(ops.gelu(x), torch.nn.functional.gelu(x, approximate="tanh"))
    torch.testing.assert_close(ops.torch_gelu(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    pair = torch.stack([x, x.flip(0)], dim=-1)
    torch.testing.assert_close(ops.geglu(pair), (x * ops.gelu(x.flip(0)))[:, None])
    torch.testing.assert_close(ops.SirenSin(2.0)(x), torch.sin(2 * x))
    assert ops.get_act("gelu2") is ops.quick_gelu and ops.get_act("identity")(x) is x
    with pytest.raises(ValueError, match="'mish'.*swish"):
        ops.get_act("mish")


def test_initialisations_draw_from_the_stated_ranges():
    torch.manual_seed(0)
    layer = nn.Linear(400, 300)
    ops.std_init(layer, init_scale=2.0)
    assert layer.weight.std().item() == pytest.approx(2.0 / 20, rel=0.02) and not layer.bias.any()
    ops.siren_init_first_layer(layer, init_scale=4.0)
    assert layer.weight.abs().max() <= 4.0 / 400 and layer.weight.abs().max() > 0.99 * 4.0 / 400
    ops.siren_init_30(layer)
    bound = math.sqrt(6 / 400) / 30
    assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.99 * bound
    ops.zero_init(layer)
    assert not layer.weight.any() and not layer.bias.any()


def test_mlp_init_uses_the_siren_first_layer_only_first():
    torch.manual_seed(0)
    layers = [nn.Linear(100, 100) for _ in range(3)]
    ops.mlp_init(layers, init="siren")
    assert layers[0].weight.abs().max() <= 0.01 and layers[1].weight.abs().max() > 0.2
    with pytest.raises(ValueError, match="init"):
        ops.mlp_init(layers, init="xavier")


def test_meta_linear_registers_meta_tensors_as_buffers_or_parameters():
    layer = ops.MetaLinear(4, 3, meta_scale=False, meta_shift=False, meta_proj=True)
    assert sorted(layer.state_dict()) == ["bias", "weight"] and [n for n, _ in layer.named_parameters()] == ["bias"]
    trainable = ops.MetaLinear(4, 3, trainable_meta=True, bias=False)
    assert sorted(n for n, _ in trainable.named_meta_parameters()) == ["scale", "shift"]
    assert trainable.bias is None


def test_meta_linear_applies_per_batch_weights_then_scale_and_shift():
    torch.manual_seed(0)
    layer = ops.MetaLinear(4, 3, meta_bias=True)
    x = torch.randn(2, 5, 6, 4)
    weight, bias = torch.randn(2, 3, 4), torch.randn(2, 3)
    scale, shift = torch.randn(2, 3), torch.randn(3)
    out = layer(x, params=dict(weight=weight, bias=bias, scale=scale, shift=shift))
    expected = (torch.einsum("bxyi,boi->bxyo", x, weight) + bias[:, None, None]) * scale[:, None, None] + shift
    torch.testing.assert_close(out, expected)
    default = layer(x)  # the registered weight, bias, scale (ones) and shift (zeros)
    torch.testing.assert_close(default, x @ layer.weight.T + layer.bias)


def test_meta_mlp_reads_each_layer_from_params_and_equals_a_plain_mlp():
    torch.manual_seed(0)
    mlp = ops.MLP(3, [8, 8], 2, act_name="swish")
    meta = ops.MetaMLP(3, [8, 8], 2, act_name="swish", meta_scale=False, meta_shift=False, meta_proj=True)
    meta.load_state_dict(mlp.state_dict())
    x = torch.randn(2, 7, 3)
    torch.testing.assert_close(meta(x), mlp(x))
    h = x
    for i, layer in enumerate(mlp.affines):
        h = h @ layer.weight.T + layer.bias
        h = ops.swish(h) if i < 2 else h
    torch.testing.assert_close(mlp(x), h)
    weights = {f"affines.{i}.weight": torch.zeros(2, *layer.weight.shape) for i, layer in enumerate(mlp.affines)}
    torch.testing.assert_close(meta(x, params=weights), mlp.affines[2].bias.expand(2, 7, 2))
    assert mlp.d == [3, 8, 8, 2] and not ops.MLP(3, [4], 2, zero_out=True).affines[-1].weight.any()


def test_shape_helpers_round_trip():
    x = torch.randn(2, 3, 4, 5)
    flat, info = ops.flatten(x)
    assert flat.shape == (2, 12, 5) and info.n_ctx == 12
    assert torch.equal(ops.unflatten(flat, info), x)
    assert ops.torchify(x).shape == (2, 5, 3, 4) and torch.equal(ops.untorchify(ops.torchify(x)), x)
    assert isinstance(ops.Conv(1, 2, 3, 1), nn.Conv1d) and ops.Conv(3, 2, 3, 3, padding=1).padding == (1, 1, 1)
    with pytest.raises(ValueError, match="n_dim"):
        ops.Conv(4, 2, 3, 1)


def test_layer_norm_computes_in_float32_and_returns_the_input_dtype():
    norm = ops.LayerNorm(8)
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    out = norm(x)
    assert out.dtype == torch.bfloat16
    expected = torch.nn.functional.layer_norm(x.float(), (8,), norm.weight, norm.bias).to(torch.bfloat16)
    assert torch.equal(out, expected)


def _embedding(patch_size: int, **kwargs) -> ops.PointSetEmbedding:
    torch.manual_seed(0)
    return ops.PointSetEmbedding(radius=0.6, n_point=5, n_sample=8, d_input=4, d_hidden=[6, 7],
                                 patch_size=patch_size, stride=2 if patch_size > 1 else 1, **kwargs)


def test_point_set_embedding_without_patches_is_a_pointwise_mlp_averaged_over_each_ball():
    embed = _embedding(1, fps_method="first").eval()
    xyz, features = torch.rand(2, 3, 40), torch.randn(2, 4, 40)
    out = embed(xyz, features)
    assert out.shape == (2, 7, 5)
    pts, centres = xyz.permute(0, 2, 1), xyz.permute(0, 2, 1)[:, :5]
    for b in range(2):
        for c in range(5):
            near = ((pts[b] - centres[b, c]) ** 2).sum(-1) <= 0.36
            index = near.nonzero()[:8, 0]  # the smallest indices in the ball (fewer than 8 are padded)
            index = torch.cat([index, index[:1].expand(8 - len(index))])
            h = torch.cat([pts[b, index] - centres[b, c], features[b, :, index].T], dim=-1)
            for conv in embed.mlp_convs:
                h = ops.swish(h @ conv.weight[:, :, 0, 0].T + conv.bias)
            torch.testing.assert_close(out[b, :, c], h.mean(dim=0), atol=1e-5, rtol=1e-5)


def test_point_set_embedding_shuffles_samples_only_with_patches():
    xyz, features = torch.rand(1, 3, 30), torch.randn(1, 4, 30)
    pointwise = _embedding(1, fps_method="first")
    state = torch.random.get_rng_state()
    pointwise(xyz, features)
    assert torch.equal(torch.random.get_rng_state(), state)  # no draws
    patched = _embedding(3, fps_method="first", padding_mode="circular")
    a = patched(xyz, features, generator=torch.Generator().manual_seed(1))
    b = patched(xyz, features, generator=torch.Generator().manual_seed(1))
    c = patched(xyz, features, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert list(patched.state_dict()) == ["mlp_convs.0.weight", "mlp_convs.0.bias", "mlp_convs.1.weight",
                                          "mlp_convs.1.bias"]


def test_point_set_embedding_groups_all_points_or_farthest_point_centres():
    xyz, features = torch.rand(2, 3, 20), torch.randn(2, 4, 20)
    assert _embedding(1, group_all=True)(xyz, features).shape == (2, 7, 1)
    fps = _embedding(1).eval()  # eval: batch element b starts its sampling from point b
    assert fps(xyz, features).shape == (2, 7, 5)
    with pytest.raises(ValueError, match="fps_method"):
        _embedding(1, fps_method="random")(xyz, features)
