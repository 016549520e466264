"""shap_e/models/generation/perceiver.py: cross-attention blocks and the perceiver diffusion trunk."""
import pytest
import torch

from shap_e.models.configs import model_from_config
from shap_e.models.generation.perceiver import (
    CrossAttention,
    MultiheadCrossAttention,
    Perceiver,
    PointDiffusionPerceiver,
    QKVMultiheadCrossAttention,
    ResidualCrossAttentionBlock,
    SimplePerceiver,
)


def reference_cross_attention(q, kv, heads):
    """docs/behaviour.md#transformer-blocks: q per head `[d]`, kv per head `[k (d) | v (d)]`, both scaled by d^-1/4, softmax."""
    batch, n, width = q.shape
    d = width // heads
    q = q.view(batch, n, heads, d)
    kv = kv.view(batch, kv.shape[1], heads, 2 * d)
    k, v = kv[..., :d], kv[..., d:]
    scale = d ** -0.25
    weight = torch.einsum("bthc,bshc->bhts", q * scale, k * scale).softmax(dim=-1)
    return torch.einsum("bhts,bshc->bthc", weight, v).reshape(batch, n, -1)


def test_qkv_cross_attention_is_the_reference_per_head_key_value_layout():
    g = torch.Generator().manual_seed(0)
    q, kv = torch.randn(2, 3, 12, generator=g), torch.randn(2, 5, 24, generator=g)
    out = QKVMultiheadCrossAttention(heads=3, n_ctx=3, n_data=5)(q, kv)
    torch.testing.assert_close(out, reference_cross_attention(q, kv, 3), atol=1e-6, rtol=0)


def test_cross_attention_block_reads_data_of_another_width():
    torch.manual_seed(0)
    block = ResidualCrossAttentionBlock(n_ctx=3, n_data=5, width=8, heads=2, data_width=6, init_scale=0.5)
    assert block.attn.c_kv.weight.shape == (16, 6) and block.ln_2.normalized_shape == (6,)
    x, data = torch.randn(2, 3, 8), torch.randn(2, 5, 6)
    attn = block.attn
    h = x + attn.c_proj(reference_cross_attention(attn.c_q(block.ln_1(x)), attn.c_kv(block.ln_2(data)), 2))
    expected = h + block.mlp.c_proj(torch.nn.functional.gelu(block.mlp.c_fc(block.ln_3(h))))
    torch.testing.assert_close(block(x, data), expected, atol=1e-5, rtol=0)


def test_simple_perceiver_stacks_blocks_and_scales_their_init_by_the_width():
    torch.manual_seed(0)
    perceiver = SimplePerceiver(n_ctx=3, n_data=5, width=64, layers=2, heads=4, init_scale=2.0)
    assert [k for k in perceiver.state_dict() if k.endswith("c_q.weight")] == [
        "resblocks.0.attn.c_q.weight", "resblocks.1.attn.c_q.weight"]
    assert abs(perceiver.resblocks[0].attn.c_q.weight.std().item() - 2.0 / 8) < 0.01
    x, data = torch.randn(2, 3, 64), torch.randn(2, 5, 64)
    expected = perceiver.resblocks[1](perceiver.resblocks[0](x, data), data)
    torch.testing.assert_close(perceiver(x, data), expected)
    assert CrossAttention is MultiheadCrossAttention and Perceiver is SimplePerceiver


def perceiver_trunk():
    torch.manual_seed(0)
    model = PointDiffusionPerceiver(input_channels=3, output_channels=6, n_ctx=10, n_latent=4, width=16,
                                    encoder_layers=1, latent_layers=1, decoder_layers=1, heads=2)
    return model.eval()


def test_point_diffusion_perceiver_starts_at_zero_and_is_permutation_equivariant():
    model = perceiver_trunk()
    x, t = torch.randn(2, 3, 10), torch.tensor([3, 400])
    assert not model(x, t).any()  # the output projection starts at zero
    torch.nn.init.normal_(model.output_proj.weight)
    out = model(x, t)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(x[:, :, perm], t), out[:, :, perm], atol=1e-5, rtol=0)
    assert (model(x, torch.tensor([3, 3]))[1] - out[1]).abs().max() > 1e-4  # the timestep matters


def test_point_diffusion_perceiver_is_built_by_name_and_checks_its_input():
    model = model_from_config({"name": "PointDiffusionPerceiver", "input_channels": 3, "output_channels": 6,
                               "n_ctx": 10, "n_latent": 4, "width": 16, "encoder_layers": 1, "latent_layers": 1,
                               "decoder_layers": 1, "heads": 2})
    assert isinstance(model, PointDiffusionPerceiver) and model.latent_embed.c_fc.in_features == 16
    with pytest.raises(ValueError, match=r"x must be \[batch, channels, 10\]"):
        model(torch.randn(1, 3, 9), torch.tensor([1]))
