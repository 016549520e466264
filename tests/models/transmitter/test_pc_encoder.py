"""shap_e/models/transmitter/pc_encoder.py and multiview_encoder.py: the vector-latent encoders."""
import math

import pytest
import torch

from shap_e.models.configs import model_from_config
from shap_e.models.transmitter.batch import MultimodalBatch
from shap_e.models.transmitter.multiview_encoder import MultiviewTransformerEncoder
from shap_e.models.transmitter.pc_encoder import PointCloudPerceiverEncoder, PointCloudTransformerEncoder
from shap_e.rendering.cameras import look_at

SHAPES = {"w.weight": (4, 5), "v.weight": (2, 3)}
PROJ = {"name": "linear", "init_scale": 1.0}


def points(n_batch=2, n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.cat([torch.rand(n_batch, 3, n, generator=g) * 2 - 1, torch.rand(n_batch, 3, n, generator=g)], 1)


def views_batch(n_batch=2, n_views=2, size=16):
    g = torch.Generator().manual_seed(0)
    angles = torch.arange(n_batch * n_views) * 1.3
    origins = torch.stack([4 * angles.cos(), 4 * angles.sin(), torch.ones_like(angles)], dim=1)
    cameras = look_at(origins, torch.zeros_like(origins), size, size, 0.7).reshape(n_batch, n_views)
    return MultimodalBatch(points=points(n_batch), views=torch.rand(n_batch, n_views, 3, size, size, generator=g),
                           depths=3 + torch.rand(n_batch, n_views, 1, size, size, generator=g), cameras=cameras)


def test_transformer_encoder_gives_latent_ctx_tokens_flattened_and_ignores_the_point_order():
    torch.manual_seed(0)
    model = PointCloudTransformerEncoder(param_shapes=SHAPES, params_proj=PROJ, d_latent=12, latent_ctx=3, n_ctx=30,
                                         width=16, layers=1, heads=2, pos_emb="nerf").eval()
    assert model.output_proj.out_features == 4 and model.input_proj.in_features == 6 * 31
    x = points()
    vector = model.encode_to_vector(MultimodalBatch(points=x))
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(1))
    assert vector.shape == (2, 12)
    torch.testing.assert_close(vector, model.encode_to_vector(MultimodalBatch(points=x[:, :, perm])), atol=1e-5, rtol=0)
    assert model(MultimodalBatch(points=x))["w.weight"].shape == (2, 4, 5)  # identity bottleneck, linear projection
    with pytest.raises(ValueError, match="d_latent=10 must be a multiple of latent_ctx=3"):
        PointCloudTransformerEncoder(param_shapes=SHAPES, params_proj=PROJ, d_latent=10, latent_ctx=3)


def perceiver(**options):
    torch.manual_seed(0)
    kwargs = dict(param_shapes=SHAPES, params_proj=PROJ, d_latent=8, latent_ctx=2, width=16, layers=2, heads=2,
                  inner_batch_size=10, data_ctx=5, fps_method="first", image_size=16, patch_size=8)
    return PointCloudPerceiverEncoder(**{**kwargs, **options}).eval()


def test_perceiver_encoder_reads_chunks_of_the_points_behind_a_prefix_of_the_first_ones():
    model = perceiver()
    assert any(k.startswith("encoder.resblocks.0.") for k in model.state_dict())  # one SimplePerceiver
    x = points()
    vector = model.encode_to_vector(MultimodalBatch(points=x), generator=torch.Generator().manual_seed(0))
    assert vector.shape == (2, 8)
    again = model.encode_to_vector(MultimodalBatch(points=x), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(vector, again)


def test_perceiver_encoder_reads_camera_modulated_views():
    model = perceiver(cross_attention_dataset="multiview", inner_batch_size=2)
    assert model.pos_emb.shape == (2 * 4, 16) and model.patch_emb.in_channels == 3
    assert model.encode_to_vector(views_batch()).shape == (2, 8)
    with pytest.raises(ValueError, match="cross_attention_dataset='multiview_pcl' is unknown"):
        perceiver(cross_attention_dataset="multiview_pcl")


def multiview_encoder(**options):
    torch.manual_seed(0)
    kwargs = dict(param_shapes=SHAPES, params_proj=PROJ, d_latent=8, latent_ctx=2, num_views=2, image_size=16,
                  patch_size=8, width=16, layers=1, heads=2, use_depth=True)
    return MultiviewTransformerEncoder(**{**kwargs, **options}).eval()


def test_multiview_encoder_reads_patches_and_one_camera_token_per_view():
    model = multiview_encoder()
    assert model.n_ctx == 2 * (1 + 4) and model.pos_emb.shape == (10, 16) and model.patch_emb.in_channels == 4
    batch = views_batch()
    vector = model.encode_to_vector(batch)
    assert vector.shape == (2, 8)
    cameras = look_at(batch.cameras.origin * 1.5, torch.zeros(4, 3), 16, 16, 0.7).reshape(2, 2)
    moved = MultimodalBatch(**{**batch.__dict__, "cameras": cameras})
    assert (model.encode_to_vector(moved) - vector).abs().max() > 1e-4
    with pytest.raises(ValueError, match="the batch has 2 views; this encoder reads num_views=3"):
        multiview_encoder(num_views=3).encode_to_vector(batch)


def test_vector_encoders_are_built_by_name_inside_a_transmitter(golden):
    renderer = golden("f")["config"]["transmitter"]["renderer"]
    encoder = {"name": "PointCloudTransformerEncoder", "params_proj": PROJ, "d_latent": 16, "latent_ctx": 4,
               "n_ctx": 30, "width": 16, "layers": 1, "heads": 2}
    model = model_from_config({"name": "Transmitter", "encoder": encoder, "renderer": renderer})
    params = model.encoder(MultimodalBatch(points=points()))
    assert params["nerstf.mlp.0.weight"].shape == (2, 16, 93)
    assert math.prod(model.encoder.params_proj.projections["nerstf__mlp__0__weight"].weight.shape) == 16 * 93 * 16
