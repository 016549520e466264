"""shap_e/models/transmitter/channels_encoder.py: datasets, the encoder's options beyond the release's,
and the transformer encoder."""
import math

import pytest
import torch

from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.models.transmitter.channels_encoder import (
    DatasetIterator,
    PointCloudPerceiverChannelsEncoder,
    PointCloudTransformerChannelsEncoder,
    sample_pcl_fps,
)
from shap_e.rendering.cameras import look_at

SHAPES = {"w.weight": (4, 5), "v.weight": (2, 3)}  # latent_ctx = 6
PROJ = {"name": "channels", "use_ln": True}


def tiny_batch(n_batch=2, n_views=3, size=16, seed=0) -> MultimodalBatch:
    g = torch.Generator().manual_seed(seed)
    angles = torch.arange(n_batch * n_views) * (2 * math.pi / (n_batch * n_views))
    origins = torch.stack([4 * angles.cos(), 4 * angles.sin(), torch.ones_like(angles)], dim=1)
    cameras = look_at(origins, torch.zeros_like(origins), size, size, 0.7).reshape(n_batch, n_views)
    return MultimodalBatch(
        points=torch.cat([torch.rand(n_batch, 3, 40, generator=g) * 2 - 1, torch.rand(n_batch, 3, 40, generator=g)], 1),
        views=torch.rand(n_batch, n_views, 3, size, size, generator=g) * 2 - 1,
        depths=3 + torch.rand(n_batch, n_views, 1, size, size, generator=g),
        view_alphas=(torch.rand(n_batch, n_views, 1, size, size, generator=g) > 0.3).float(),
        cameras=cameras,
    )


def encoder(**options):
    torch.manual_seed(0)
    kwargs = dict(param_shapes=SHAPES, params_proj=PROJ, d_latent=8, width=16, layers=2, heads=2, data_ctx=4,
                  inner_batch_size=40, fps_method="first", pos_emb="nerf", image_size=16, patch_size=8)
    return PointCloudPerceiverChannelsEncoder(**{**kwargs, **options}).eval()


def test_dataset_iterator_yields_a_fresh_permutation_per_element_and_reshuffles_when_exhausted():
    embs = torch.arange(2 * 6, dtype=torch.float32).view(2, 6, 1)
    it = iter(DatasetIterator(embs, 4, torch.Generator().manual_seed(0)))
    first, second = next(it), next(it)  # 4 + 4 > 6: the second chunk comes from a new permutation
    for row in range(2):
        for chunk in (first, second):
            values = set(chunk[row, :, 0].tolist())
            assert len(values) == 4 and values <= set(embs[row, :, 0].tolist())
    again = iter(DatasetIterator(embs, 4, torch.Generator().manual_seed(0)))
    assert torch.equal(next(again), first)
    with pytest.raises(ValueError, match=r"batch_size=7 must be in \[1, 6\]"):
        DatasetIterator(embs, 7)


def test_sample_pcl_fps_first_takes_the_leading_points():
    points = torch.randn(2, 10, 6)
    assert torch.equal(sample_pcl_fps(points, 4, "first"), points[:, :4])
    assert torch.equal(sample_pcl_fps(points, 10, "fps"), points)
    with pytest.raises(ValueError, match="unsupported farthest-point sampling method 'random'"):
        sample_pcl_fps(points, 4, "random")


def test_points_without_position_encoding_are_projected_raw():
    model = encoder(pos_emb=None)
    assert model.input_proj.in_features == 6
    batch = tiny_batch()
    tokens = model.project_points(batch.points.permute(0, 2, 1))
    torch.testing.assert_close(tokens, model.input_proj(batch.points.permute(0, 2, 1)))
    assert model.encode_to_channels(batch).shape == (2, 6, 8)


def test_multiview_dataset_reads_camera_modulated_patches_with_a_position_embedding():
    model = encoder(cross_attention_dataset="multiview", inner_batch_size=3, use_depth=True, pose_dropout=1.0)
    assert model.pos_emb.shape == (3 * 4, 16) and model.patch_emb.in_channels == 4
    assert model.camera_emb[-1].out_features == 32
    batch = tiny_batch()
    cameras = look_at(batch.cameras.origin * 1.5, torch.zeros(6, 3), 16, 16, 0.7).reshape(2, 3)
    moved = MultimodalBatch(**{**batch.__dict__, "cameras": cameras})
    g = torch.Generator().manual_seed(5)
    out = model.encode_to_channels(batch, generator=g)
    assert out.shape == (2, 6, 8)
    other = model.encode_to_channels(moved, generator=torch.Generator().manual_seed(5))
    assert (out - other).abs().max() > 1e-4  # in eval the cameras matter
    model.train()  # pose_dropout=1: every camera modulation is dropped
    a = model.encode_to_channels(batch, generator=torch.Generator().manual_seed(5))
    b = model.encode_to_channels(moved, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)


def test_multiview_point_cloud_alone_reads_the_views_only():
    model = encoder(cross_attention_dataset="multiview_pcl", inner_batch_size=3, use_depth=True)
    assert len(model.encoder) == 1 and model.mv_pcl_embed.unk_token.shape == (279,)
    batch = tiny_batch()
    out = model.encode_to_channels(batch, generator=torch.Generator().manual_seed(0))
    changed = MultimodalBatch(**{**batch.__dict__, "points": batch.points.clone()})
    changed.points[:, :, 4:] = 0  # only the first data_ctx points (the prefix) are read
    torch.testing.assert_close(out, model.encode_to_channels(changed, generator=torch.Generator().manual_seed(0)))
    assert model.batch_options() == dict(point_count=4, mv_light_mode="basic", mv_num_views=3, mv_image_size=16)


def test_bad_encoder_options_are_named():
    with pytest.raises(ValueError, match="needs use_depth=True"):
        encoder(cross_attention_dataset="multiview_pcl", use_depth=False)
    with pytest.raises(ValueError, match=r"reads 2 dataset\(s\); give as many inner_batch_size values, got \[40\]"):
        encoder(cross_attention_dataset="pcl_and_multiview_pcl", use_depth=True)
    with pytest.raises(ValueError, match="pos_emb='sh' is unknown"):
        encoder(pos_emb="sh")
    with pytest.raises(ValueError, match="at least data_ctx=4"):
        encoder().encode_to_channels(MultimodalBatch(points=torch.rand(1, 6, 3)))


def test_unrolls_repeat_the_perceiver_in_eval_and_draw_their_number_in_training():
    model = encoder(inner_batch_size=10, min_unrolls=1, max_unrolls=3)
    assert model.get_n_unrolls() == 3
    model.train()
    draws = {model.get_n_unrolls(torch.Generator().manual_seed(s)) for s in range(20)}
    assert draws == {1, 2, 3}
    model.eval()
    batch = tiny_batch()
    calls = []
    model.processor.register_forward_hook(lambda m, i, o: calls.append(1))
    model.encode_to_channels(batch)
    assert len(calls) == 3


def test_transformer_channels_encoder_reads_every_point_in_any_order():
    torch.manual_seed(0)
    model = PointCloudTransformerChannelsEncoder(param_shapes=SHAPES, params_proj=PROJ, d_latent=8, n_ctx=40,
                                                 width=16, layers=2, heads=2).eval()
    batch = tiny_batch()
    out = model.encode_to_channels(batch)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(1))
    shuffled = model.encode_to_channels(MultimodalBatch(points=batch.points[:, :, perm]))
    assert out.shape == (2, 6, 8)
    torch.testing.assert_close(out, shuffled, atol=1e-5, rtol=0)
    assert model.bottleneck_to_params(model.encode_to_bottleneck(batch))["w.weight"].shape == (2, 4, 5)


def test_sample_fps_picks_far_apart_points_and_keeps_their_channels():
    pytest.importorskip("shap_e.rendering.point_cloud", reason="farthest-point sampling lives in rendering.point_cloud")
    from shap_e.models.transmitter.channels_encoder import sample_fps

    line = torch.arange(100, dtype=torch.float32)
    example = torch.stack([line, torch.zeros(100), torch.zeros(100), line * 2, -line], dim=1)[None]
    sampled = sample_fps(example, 2)
    assert sampled.shape == (1, 2, 5)
    assert {0.0, 99.0} & set(sampled[0, :, 0].tolist())  # the second pick is the farthest point: an end
    torch.testing.assert_close(sampled[0, :, 3], sampled[0, :, 0] * 2)
    torch.testing.assert_close(sampled[0, :, 4], -sampled[0, :, 0])
    assert sample_pcl_fps(example, 2, "fps").shape == (1, 2, 5)
    with pytest.raises(ValueError, match="n_points >= n_samples=200"):
        sample_fps(example, 200)


def test_dense_pose_views_embed_every_pixel_with_its_ray():
    model = encoder(cross_attention_dataset="dense_pose_multiview", inner_batch_size=3, use_depth=True)
    assert model.patch_emb.in_channels == 8 and not hasattr(model, "mv_pcl_embed")
    batch = tiny_batch()
    tokens = model.encode_dense_pose_views(batch)
    assert tokens.shape == (2, 3, 4, 16)
    rays, _ = model.dense_pose_cameras_to_tensor(batch.cameras)
    images = torch.cat([batch.views, batch.depths.clamp(max=5.0) / 5.0 * 2 - 1], dim=2)
    rays = rays.permute(0, 1, 4, 5, 2, 3)
    pixels = model.mv_pose_embed(images, rays[:, :, 0], rays[:, :, 1])
    torch.testing.assert_close(tokens[0, 1], model.patch_emb(pixels[0, 1]).flatten(1).T)
    assert model.encode_to_channels(batch, generator=torch.Generator().manual_seed(0)).shape == (2, 6, 8)


def test_point_convolutions_around_farthest_point_samples():
    model = encoder(use_pointconv=True, fps_method="fps", pointconv_samples=8, pointconv_patch_size=2)
    assert model.point_conv.fps_method == "fps"
    out = model.encode_to_channels(tiny_batch(), generator=torch.Generator().manual_seed(0))
    again = model.encode_to_channels(tiny_batch(), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, again)
