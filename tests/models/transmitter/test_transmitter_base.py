"""shap_e/models/transmitter/base.py and batch.py: the official AttrDict batch, encoders and decoders."""
import pytest
import torch
from PIL import Image

from shap_e.models.configs import model_from_config
from shap_e.models.transmitter.base import ChannelsDecoder, Transmitter, VectorDecoder, meta_param_shapes
from shap_e.models.transmitter.batch import MultimodalBatch, as_multimodal_batch
from shap_e.rendering.view_data import ProjectiveCamera
from shap_e.util.collections import AttrDict

# The golden README's acceptance for encoder latents (see test_transmitter_golden.py).
LATENT_ATOL = 2e-3


def official_batch(e) -> AttrDict:
    """Golden e's inputs as `load_or_create_multimodal_batch` gives them: PIL views and alphas, numpy
    depths and cameras, in lists per element."""
    inp, cam = e["inputs"], e["inputs"]["cameras"]
    n_batch, n_views = inp["depths"].shape[:2]

    def camera(b, v):
        return ProjectiveCamera(*(cam[k][b, v].numpy() for k in ("origin", "x", "y", "z")), cam["width"],
                                cam["height"], cam["x_fov"], cam["y_fov"])

    return AttrDict(
        points=inp["points"],
        views=[[Image.fromarray(inp["views_uint8"][b, v].numpy()) for v in range(n_views)] for b in range(n_batch)],
        depths=[[inp["depths"][b, v].numpy() for v in range(n_views)] for b in range(n_batch)],
        view_alphas=[[Image.fromarray(inp["view_alphas_uint8"][b, v].numpy(), "L") for v in range(n_views)]
                     for b in range(n_batch)],
        cameras=[[camera(b, v) for v in range(n_views)] for b in range(n_batch)],
    )


def test_the_official_batch_encodes_to_the_golden_latent(golden, transmitter):
    e = golden("e")
    torch.manual_seed(777)
    with torch.no_grad():
        latent = transmitter.encoder.encode_to_bottleneck(official_batch(e))
    torch.testing.assert_close(latent, e["outputs"]["latent"], atol=LATENT_ATOL, rtol=0)
    torch.manual_seed(777)
    with torch.no_grad():
        params = transmitter.encoder(official_batch(e))  # forward = bottleneck_to_params(encode_to_bottleneck)
    torch.testing.assert_close(params["nerstf.mlp.0.weight"], e["outputs"]["params"]["nerstf.mlp.0.weight"],
                               atol=LATENT_ATOL, rtol=0)


def test_the_official_batch_converts_to_tensors_once(golden):
    e = golden("e")
    batch = as_multimodal_batch(official_batch(e), image_size=16, max_depth=9.0)
    inp = e["inputs"]
    torch.testing.assert_close(batch.views, inp["views_uint8"].permute(0, 1, 4, 2, 3).float() / 127.5 - 1)
    torch.testing.assert_close(batch.depths, inp["depths"][:, :, None].clamp(max=9.0))
    torch.testing.assert_close(batch.view_alphas, inp["view_alphas_uint8"][:, :, None].float() / 255)
    assert batch.cameras.shape == (2, 3) and batch.cameras.width == 16
    assert as_multimodal_batch(batch, 16, 9.0) is batch
    with pytest.raises(ValueError, match="points"):
        as_multimodal_batch(AttrDict(views=[]), 16, 9.0)


def test_dense_pose_rays_match_the_golden_ones(golden, transmitter):
    e = golden("e")
    rays, z = transmitter.encoder.dense_pose_cameras_to_tensor(official_batch(e).cameras)
    torch.testing.assert_close(rays, e["outputs"]["dense_pose_rays"], atol=1e-6, rtol=0)
    torch.testing.assert_close(z, e["outputs"]["dense_pose_camera_z"])


def test_a_generator_in_the_options_place_is_a_clear_error(golden, transmitter):
    batch = MultimodalBatch(points=golden("e")["inputs"]["points"])
    with pytest.raises(TypeError, match="pass a torch.Generator as generator="):
        transmitter.encoder.encode_to_bottleneck(batch, torch.Generator())


def test_transmitter_encoder_projects_to_the_renderer_meta_weights(golden, transmitter):
    assert isinstance(transmitter, Transmitter)
    shapes = meta_param_shapes(transmitter.renderer)
    assert shapes == {f"nerstf.mlp.{i}.weight": (16, 93 if i == 0 else 16) for i in range(4)}
    assert transmitter.encoder.param_shapes == shapes and transmitter.encoder.latent_ctx == 64
    latent = torch.randn(1, 64 * 24)
    channels = transmitter.encoder.bottleneck_to_channels(latent)
    torch.testing.assert_close(channels.flatten(1), latent)


def decoder_config(golden, **top):
    config = dict(golden("f")["config"]["decoder"], **top)
    return config


def test_channels_decoder_is_the_transmitter_projection_without_the_encoder(golden):
    decoder = model_from_config(decoder_config(golden))
    assert isinstance(decoder, ChannelsDecoder) and decoder.latent_ctx == 64
    assert decoder.bottleneck_to_channels(torch.zeros(2, 64 * 24)).shape == (2, 64, 24)
    with pytest.raises(ValueError, match="latent_ctx=32 does not match the renderer's meta weights"):
        model_from_config(decoder_config(golden, latent_ctx=32))


def test_vector_decoder_unwarps_then_projects_one_vector(golden):
    config = {k: v for k, v in decoder_config(golden).items() if k != "latent_ctx"}
    config.update(name="VectorDecoder", d_latent=8, params_proj={"name": "linear", "init_scale": 1.0},
                  latent_warp={"name": "tan2"})
    torch.manual_seed(0)
    decoder = model_from_config(config)
    assert isinstance(decoder, VectorDecoder)
    latent = torch.rand(2, 8) * 1.8 - 0.9
    params = decoder.bottleneck_to_params(latent)
    assert params["nerstf.mlp.0.weight"].shape == (2, 16, 93)
    proj = decoder.params_proj.projections["nerstf__mlp__1__weight"]
    expected = proj(decoder.latent_warp.unwarp(latent)).view(2, 16, 16)
    torch.testing.assert_close(params["nerstf.mlp.1.weight"], expected)


def test_decoders_project_to_every_meta_tensor_of_any_renderer():
    mlp = {"d_hidden": 8, "n_hidden_layers": 2, "meta_parameters": True, "meta_stop": 0}
    renderer = {"name": "STFRenderer", "grid_size": 8, "sdf": {"name": "MLPSDFModel", **mlp},
                "tf": {"name": "MLPTextureFieldModel", **mlp},
                "volume": {"name": "BoundingBoxVolume", "bbox_min": [-1, -1, -1], "bbox_max": [1, 1, 1]}}
    torch.manual_seed(0)
    decoder = model_from_config({"name": "VectorDecoder", "d_latent": 16, "params_proj": {"name": "linear"},
                                 "renderer": renderer})
    meta = {f"{field}.{name}": tuple(t.shape) for field in ("sdf", "tf")
            for name, t in getattr(decoder.renderer, field).meta_state_dict().items()}
    assert decoder.param_shapes == meta and "sdf.mlp.0.weight" in meta
    params = decoder.bottleneck_to_params(torch.randn(2, 16))
    assert {k: tuple(v.shape[1:]) for k, v in params.items()} == meta
