"""The official STF fields (`shap_e.models.stf.mlp`) and `STFRenderer` / `render_views_from_stf`."""
import pytest
import torch
import torch.nn as nn

from shap_e.models.nn.camera import camera_batch
from shap_e.models.nn.encoding import encode_position, maybe_encode_direction
from shap_e.models.nn.meta import MetaModule
from shap_e.models.query import Query
from shap_e.models.stf.base import Model
from shap_e.models.stf.mlp import MLPModel, MLPSDFModel, MLPTextureFieldModel
from shap_e.models.stf.renderer import STFRenderer, render_views_from_stf
from shap_e.models.volume import BoundingBoxVolume
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.util.collections import AttrDict

BOX = dict(bbox_min=[-1.0] * 3, bbox_max=[1.0] * 3)


def test_mlp_model_runs_its_layers_with_the_direction_inserted():
    torch.manual_seed(0)
    model = MLPModel(n_output=2, output_activation="tanh", posenc_version="nerf", insert_direction_at=2, d_hidden=8,
                     n_hidden_layers=3, activation="swish")
    position, direction = torch.rand(1, 4, 3), torch.nn.functional.normalize(torch.randn(1, 4, 3), dim=-1)
    h = encode_position("nerf", position=position)
    for i, layer in enumerate(model.mlp):
        if i == 2:
            h = torch.cat([h, maybe_encode_direction("nerf", position=position, direction=direction)], dim=-1)
        h = layer(h)
        h = h * torch.sigmoid(h) if i < 3 else torch.tanh(h)
    torch.testing.assert_close(model(Query(position=position, direction=direction)), h)
    assert model.mlp[2].in_features == 8 + 51


def test_meta_layers_take_their_weights_from_params():
    model = MLPSDFModel(d_hidden=4, n_hidden_layers=2, meta_parameters=True, n_meta_layers=1, initial_bias=0.25)
    assert isinstance(model, (MetaModule, Model)) and model.mlp[-1].bias.item() == 0.25
    assert [type(layer).__name__ for layer in model.mlp] == ["MetaLinear", "Linear", "Linear"]
    query = Query(position=torch.rand(2, 5, 3))
    zero = {"mlp.0.weight": torch.zeros(2, 4, model.mlp[0].weight.shape[1]), "mlp.0.bias": torch.zeros(2, 4)}
    out = model(query, params=zero).signed_distance
    assert out.shape == (2, 5, 1) and torch.allclose(out, out[:, :1].expand_as(out))  # constant field
    assert not torch.allclose(model(query).signed_distance, out)


def test_texture_field_gives_colours_and_batched_queries_agree():
    torch.manual_seed(0)
    model = MLPTextureFieldModel(n_channels=4, d_hidden=8, n_hidden_layers=2)
    query = Query(position=torch.rand(1, 50, 3))
    whole = model(query).channels
    assert whole.shape == (1, 50, 4) and ((whole > 0) & (whole < 1)).all()
    torch.testing.assert_close(model.forward_batched(query, query_batch_size=7).channels, whole)
    with pytest.raises(ValueError, match="query_batch_size"):
        model.forward_batched(query, query_batch_size=0)


class Sphere(nn.Module, Model):
    """SDF of a sphere of radius 0.5 (positive inside) and a colour that depends on height."""

    def forward(self, query, params=None, options=None):
        position = query.position
        return AttrDict(signed_distance=0.5 - position.norm(dim=-1, keepdim=True),
                        channels=torch.cat([position[..., 2:] * 0 + 0.8, (position[..., 2:] + 1) / 2,
                                            torch.zeros_like(position[..., :1])], dim=-1))


def test_stf_renderer_meshes_and_shades_its_fields():
    sphere = Sphere()
    renderer = STFRenderer(sphere, sphere, BoundingBoxVolume(**BOX), grid_size=24, output_srgb=False)
    out = renderer.render_views(AttrDict(cameras=camera_batch(create_pan_cameras(16))))
    mesh = out.raw_meshes[0]
    radius = mesh.verts.norm(dim=-1)
    shrink = (24 - 1) / (24 + 1)  # the official vertex placement (docs/behaviour.md#stf-meshes)
    assert (radius - 0.5 * shrink).abs().max() < 0.02
    torch.testing.assert_close(mesh.vertex_channels["R"], torch.full_like(radius, 0.8))
    assert out.channels.shape == (1, 20, 16, 16, 3) and bool(out.mesh_mask.all()) and "raw_density" not in out
    covered = out.transmittance[..., 0] < 1
    assert covered.any() and (out.channels[~covered] == 0).all()
    # green / red is (z + 1) / 1.6 whatever the shading: it grows up the image of the sphere
    view, seen = out.channels[0, 0], covered[0, 0]
    ratio = view[..., 1] / view[..., 0].clamp(min=1e-6)
    rows = [float(ratio[row][seen[row]].mean()) for row in range(16) if seen[row].any()]
    assert len(rows) >= 3 and rows == sorted(rows, reverse=True)
    with pytest.raises(TypeError, match="BoundingBoxVolume"):
        STFRenderer(sphere, sphere, object(), grid_size=8)


def test_specular_light_is_named_as_ignored_by_the_torch_rasteriser():
    sphere = Sphere()
    with pytest.warns(UserWarning, match="specular_color is ignored"):
        render_views_from_stf(AttrDict(cameras=camera_batch(create_pan_cameras(4))), AttrDict(), sdf_fn=sphere.forward_batched,
                              tf_fn=sphere.forward_batched, nerstf_fn=None, volume=BoundingBoxVolume(**BOX), grid_size=8,
                              channel_scale=torch.tensor([1.0, 1.0, 1.0]))


def test_render_views_from_stf_of_the_nerstf_field_is_the_official_stf_output(golden, golden_renderer):
    f = golden("f")
    renderer = golden_renderer
    params = renderer.mlp_params(f["outputs"]["params"])

    def nerstf_fn(query, query_batch_size=4096):
        out = renderer.nerstf.query(query.position, params, None, ("sdf", "density_fine", "color_stf"))
        return AttrDict(signed_distance=out.sdf, density=out.density_fine, channels=out.color_stf)

    with torch.no_grad():
        out = render_views_from_stf(
            AttrDict(cameras=camera_batch(create_pan_cameras(2))), AttrDict(), sdf_fn=None, tf_fn=None,
            nerstf_fn=nerstf_fn, volume=BoundingBoxVolume(**BOX), grid_size=32, channel_scale=torch.full((3,), 255.0),
            ambient_color=0.3, diffuse_color=0.7, specular_color=0.0, output_srgb=True,
        )
    ref = f["outputs"]["stf"]
    torch.testing.assert_close(out.fields, ref["fields_padded"], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.raw_density, ref["raw_density"], atol=1e-5, rtol=0)
    assert torch.equal(out.raw_meshes[0].faces, ref["mesh"]["faces"])
    for c in "RGB":
        torch.testing.assert_close(out.raw_meshes[0].vertex_channels[c], ref["mesh"]["vertex_channels"][c],
                                   atol=5e-5, rtol=0)
    torch.testing.assert_close(out.aux_losses.cross_entropy, ref["cross_entropy_aux_loss"], atol=1e-5, rtol=0)
    assert out.channels.shape == (1, 20, 2, 2, 3) and torch.equal(out.mesh_mask, ref["mesh_mask"])
