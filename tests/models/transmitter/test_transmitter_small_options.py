"""Transmitter options used by the small models: points only (`cross_attention_dataset: pcl`,
`use_pointconv: false`: no multiview modules, no views needed, the prefix reads the FPS points) and
a NeRSTF position encoding with fewer frequencies (`position_degrees`)."""
import pytest
import torch

from shap_e.models.configs import model_from_config
from shap_e.models.transmitter.batch import MultimodalBatch


@pytest.fixture(scope="module")
def model(points_only_transmitter):
    torch.manual_seed(0)
    return model_from_config(points_only_transmitter(inner_batch_size=64)).eval()


def test_points_only_encoder_has_no_multiview_or_pointconv_weights(model):
    keys = list(model.state_dict())
    assert not any(k.startswith(("encoder.mv_pcl_embed", "encoder.patch_emb", "encoder.point_conv")) for k in keys)
    assert not any(k.startswith("encoder.encoder.1.") for k in keys)
    assert model.encoder.use_views is False and model.encoder.inner_batch_size == (64,)


def test_points_only_encoder_encodes_a_batch_without_views(model):
    points = torch.cat([torch.rand(2, 3, 64) * 2 - 1, torch.rand(2, 3, 64)], dim=1)
    with torch.no_grad():
        latent = model.encoder.encode_to_bottleneck(MultimodalBatch(points=points))
    expected = model.encoder.latent_ctx * model.encoder.d_latent
    assert latent.shape == (2, expected) and latent.abs().max() < 1
    params = model.bottleneck_to_params(latent)
    assert set(params) == set(model.encoder.param_shapes)


def test_prefix_tokens_depend_only_on_the_first_data_ctx_points(model):
    """Without point convolution the prefix is the first `data_ctx` farthest-point-ordered points."""
    seen = []
    hook = model.encoder.ln_pre.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    points = torch.rand(1, 6, 64)
    changed = points.clone()
    changed[:, :, model.encoder.data_ctx:] = torch.rand(1, 6, 64 - model.encoder.data_ctx)
    with torch.no_grad():
        for p in (points, changed):
            model.encoder.encode_to_channels(MultimodalBatch(points=p), generator=torch.Generator().manual_seed(0))
    hook.remove()
    n = model.encoder.data_ctx
    torch.testing.assert_close(seen[0][:, :n], seen[1][:, :n], atol=0, rtol=0)


def test_unknown_cross_attention_dataset_is_a_clear_error(points_only_transmitter):
    config = points_only_transmitter(inner_batch_size=64)
    config["encoder"]["cross_attention_dataset"] = "voxels"
    with pytest.raises(ValueError, match="cross_attention_dataset='voxels' is unknown"):
        model_from_config(config)


def test_fewer_position_degrees_narrow_the_first_meta_layer(points_only_transmitter):
    from shap_e.models.nn.encoding import posenc_nerf

    config = points_only_transmitter(inner_batch_size=64)
    config["renderer"]["nerstf"]["position_degrees"] = 6
    torch.manual_seed(0)
    model = model_from_config(config).eval()
    assert model.encoder.param_shapes["nerstf.mlp.0.weight"][1] == 3 * (1 + 2 * 6)
    points = torch.cat([torch.rand(1, 3, 64) * 2 - 1, torch.rand(1, 3, 64)], dim=1)
    with torch.no_grad():
        params = model.encoder(MultimodalBatch(points=points))
        mlp = {k[len("nerstf."):]: v for k, v in params.items()}
        position = torch.rand(1, 5, 3) * 2 - 1
        sdf = model.renderer.nerstf.query(position, mlp, None, ("sdf",)).sdf
        first = posenc_nerf(position, 0, 6) @ mlp["mlp.0.weight"].transpose(1, 2) + model.renderer.nerstf.mlp[0].bias
    assert sdf.shape == (1, 5, 1)
    hook_out = []
    handle = model.renderer.nerstf.mlp[0].register_forward_hook(lambda m, i, o: hook_out.append(o))
    with torch.no_grad():
        model.renderer.nerstf.query(position, mlp, None, ("sdf",))
    handle.remove()
    torch.testing.assert_close(hook_out[0], first)


def test_position_degrees_out_of_range_is_a_clear_error(points_only_transmitter):
    config = points_only_transmitter(inner_batch_size=64)
    config["renderer"]["nerstf"]["position_degrees"] = 16
    with pytest.raises(ValueError, match="position_degrees=16 must be in 1..15"):
        model_from_config(config)
