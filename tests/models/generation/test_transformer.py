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


# ---- the official blocks -------------------------------------------------------------------------

import math  # noqa: E402

import pytest  # noqa: E402

from shap_e.models.generation.transformer import (  # noqa: E402
    MLP,
    CLIPImageGridPointDiffusionTransformer,
    CLIPImageGridUpsamplePointDiffusionTransformer,
    CLIPImagePointDiffusionTransformer,
    ImageGridConditionedTransformer,
    MultiheadAttention,
    PointDiffusionTransformer,
    QKVMultiheadAttention,
    ResidualAttentionBlock,
    SelfAttention,
    TextConditionedTransformer,
    Transformer,
    UpsamplePointDiffusionTransformer,
    init_linear,
)


def reference_attention(qkv, heads):
    """docs/behaviour.md#transformer-blocks written out: per head [q | k | v] slices, q and k scaled by d^-1/4, float32 softmax."""
    batch, n, width3 = qkv.shape
    d = width3 // heads // 3
    per_head = qkv.view(batch, n, heads, 3 * d)
    q, k, v = per_head[..., :d], per_head[..., d:2 * d], per_head[..., 2 * d:]
    scale = d ** -0.25
    weight = torch.einsum("bthc,bshc->bhts", q * scale, k * scale).softmax(dim=-1)
    return torch.einsum("bhts,bshc->bthc", weight, v).reshape(batch, n, -1)


def test_qkv_attention_is_the_reference_per_head_interleaved_attention():
    qkv = torch.randn(2, 7, 3 * 12, generator=torch.Generator().manual_seed(0))
    out = QKVMultiheadAttention(heads=3, n_ctx=7)(qkv)
    torch.testing.assert_close(out, reference_attention(qkv, 3), atol=1e-6, rtol=0)


def test_residual_attention_block_is_pre_layernorm_attention_then_mlp():
    torch.manual_seed(0)
    block = ResidualAttentionBlock(n_ctx=5, width=8, heads=2, init_scale=0.5)
    x = torch.randn(3, 5, 8)
    h = x + block.attn.c_proj(reference_attention(block.attn.c_qkv(block.ln_1(x)), 2))
    mlp = block.mlp
    expected = h + mlp.c_proj(torch.nn.functional.gelu(mlp.c_fc(block.ln_2(h))))
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=0)


def test_init_linear_draws_weights_with_the_given_std_and_zero_bias():
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 256)
    init_linear(layer, 0.1)
    assert abs(layer.weight.std().item() - 0.1) < 0.005 and not layer.bias.any()


def test_transformer_scales_the_init_by_the_width_and_blocks_take_the_std_as_given():
    torch.manual_seed(0)
    trunk = Transformer(n_ctx=4, width=64, layers=1, heads=4, init_scale=2.0)
    assert abs(trunk.resblocks[0].attn.c_qkv.weight.std().item() - 2.0 / math.sqrt(64)) < 0.01
    mlp = MLP(width=64, init_scale=0.5)
    assert abs(mlp.c_fc.weight.std().item() - 0.5) < 0.02


def test_blocks_reject_a_width_that_heads_do_not_divide():
    with pytest.raises(ValueError, match="width=10 must be divisible by heads=4"):
        MultiheadAttention(n_ctx=3, width=10, heads=4, init_scale=1.0)


def test_blocks_and_trunks_take_the_official_dtype():
    trunk = PointDiffusionTransformer(dtype=torch.float64, input_channels=2, output_channels=4, n_ctx=3, width=8,
                                      layers=1, heads=2)
    assert {p.dtype for p in trunk.parameters()} == {torch.float64}
    out = trunk(torch.randn(1, 2, 3, dtype=torch.float64), torch.tensor([5]))
    assert out.shape == (1, 4, 3)


def test_the_old_class_names_are_the_official_classes():
    assert TextConditionedTransformer is CLIPImagePointDiffusionTransformer
    assert ImageGridConditionedTransformer is CLIPImageGridPointDiffusionTransformer
    assert SelfAttention is MultiheadAttention


def test_point_diffusion_transformer_is_conditioned_on_time_only():
    torch.manual_seed(0)
    trunk = PointDiffusionTransformer(input_channels=3, output_channels=6, n_ctx=5, width=16, layers=1, heads=2,
                                      time_token_cond=True, use_pos_emb=True)
    torch.nn.init.normal_(trunk.output_proj.weight)
    x = torch.randn(2, 3, 5)
    a, b = trunk(x, torch.tensor([1, 1])), trunk(x, torch.tensor([1, 900]))
    assert a.shape == (2, 6, 5)
    torch.testing.assert_close(a[0], b[0])
    assert (a[1] - b[1]).abs().max() > 1e-3
    with pytest.raises(ValueError, match=r"x must be \[batch, 3, 5\]"):
        trunk(torch.randn(2, 3, 4), torch.tensor([1, 1]))


def upsampler(cls=UpsamplePointDiffusionTransformer, **kwargs):
    torch.manual_seed(0)
    model = cls(input_channels=3, output_channels=6, n_ctx=6, cond_ctx=4, width=16, layers=1, heads=2,
                time_token_cond=True, **kwargs)
    torch.nn.init.normal_(model.output_proj.weight)
    return model.eval()


def test_upsampler_reads_the_low_resolution_points_as_tokens_after_the_channel_affine():
    model = upsampler(channel_scales=[2.0, 1.0, 1.0], channel_biases=[0.0, 0.5, 0.0])
    x, t = torch.randn(1, 3, 6), torch.tensor([10])
    low_res = torch.randn(1, 3, 4)
    seen = []
    model.cond_point_proj.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    out = model(x, t, low_res=low_res)
    expected_in = (low_res * torch.tensor([2.0, 1.0, 1.0])[:, None] + torch.tensor([0.0, 0.5, 0.0])[:, None])
    torch.testing.assert_close(seen[0], expected_in.permute(0, 2, 1))
    assert out.shape == (1, 6, 6)
    assert (model(x, t, low_res=low_res + 1) - out).abs().max() > 1e-4
    assert {"channel_scales", "channel_biases"} <= set(model.state_dict())
    with pytest.raises(ValueError, match="channel_scales needs 3 values"):
        upsampler(channel_scales=[1.0, 2.0])


def test_grid_upsampler_adds_grid_tokens_and_passes_low_res_through_cached_kwargs():
    model = upsampler(CLIPImageGridUpsamplePointDiffusionTransformer, grid_channels=8, grid_tokens=3)
    x, t, low_res = torch.randn(2, 3, 6), torch.tensor([10, 10]), torch.randn(2, 3, 4)
    grid = torch.randn(2, 8, 3)
    cached = model.cached_model_kwargs(2, {"embeddings": grid, "low_res": low_res})
    assert set(cached) == {"embeddings", "low_res"} and cached["low_res"] is low_res
    with_grid = model(x, t, **cached)
    without = model(x, t, low_res=low_res)  # no grid: the unconditional all-zero grid
    torch.testing.assert_close(without, model(x, t, low_res=low_res, embeddings=torch.zeros(2, 8, 3)))
    assert (with_grid - without).abs().max() > 1e-4


@pytest.fixture
def tiny_default_clip(tiny_clip, monkeypatch):
    """`$SHAP_E_CLIP` pointed at the 1-layer random CLIP (768-d projection, 32 x 16 patch grid)."""
    monkeypatch.setenv("SHAP_E_CLIP", str(tiny_clip))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from shap_e.models.clip import FrozenCLIP

    return FrozenCLIP.from_pretrained(tiny_clip)


def test_text_trunk_embeds_texts_with_its_frozen_clip_like_precomputed_embeddings(tiny_default_clip):
    torch.manual_seed(0)
    model = CLIPImagePointDiffusionTransformer(input_channels=4, output_channels=8, n_ctx=3, width=16, layers=1,
                                               heads=2, token_cond=True).eval()
    torch.nn.init.normal_(model.output_proj.weight)
    x, t = torch.randn(2, 4, 3), torch.tensor([5, 7])
    texts = ["a red chair", None]
    embedded = tiny_default_clip.embed_text(["a red chair"])
    expected = model(x, t, embeddings=torch.cat([embedded, torch.zeros(1, 768)]))
    torch.testing.assert_close(model(x, t, texts=texts), expected, atol=1e-5, rtol=0)
    cached = model.cached_model_kwargs(2, {"texts": texts})
    torch.testing.assert_close(cached["embeddings"][0], embedded[0], atol=1e-6, rtol=0)


def test_grid_trunk_embeds_images_with_its_frozen_clip_grid(tiny_default_clip):
    import numpy as np

    torch.manual_seed(0)
    model = CLIPImageGridPointDiffusionTransformer(input_channels=4, output_channels=8, n_ctx=3, width=16, layers=1,
                                                   heads=2, grid_channels=32, grid_tokens=16).eval()
    images = [np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8)]
    grid = tiny_default_clip.embed_images_grid(images)
    x, t = torch.randn(1, 4, 3), torch.tensor([5])
    torch.testing.assert_close(model(x, t, images=images), model(x, t, embeddings=grid), atol=1e-5, rtol=0)


def test_embeddings_of_the_wrong_shape_are_named():
    model = CLIPImageGridPointDiffusionTransformer(input_channels=4, output_channels=8, n_ctx=3, width=16, layers=1,
                                                   heads=2, grid_channels=8, grid_tokens=5)
    with pytest.raises(ValueError, match=r"embeddings must be \[1, 8, 5\]"):
        model(torch.randn(1, 4, 3), torch.tensor([1]), embeddings=torch.zeros(1, 5, 8))
