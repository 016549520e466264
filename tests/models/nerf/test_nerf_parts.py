"""The official NeRF building blocks: samplers, volume integrals, the NeRF MLP and the void."""
import pytest
import torch

from shap_e.models.nerf.model import MLPNeRFModel, VoidNeRFModel, maybe_get_spherical_harmonics_basis
from shap_e.models.nerf.ray import ImportanceRaySampler, RayVolumeIntegralResults, StratifiedRaySampler
from shap_e.models.nn.encoding import encode_position
from shap_e.models.query import Query
from shap_e.models.volume import VolumeRange
from shap_e.util.collections import AttrDict


@pytest.mark.parametrize("mode", ["linear", "geometric", "harmonic"])
def test_stratified_samples_fall_one_per_stratum(mode):
    t0, t1 = torch.full((2, 5, 1), 1.0), torch.full((2, 5, 1), 4.0)
    torch.manual_seed(0)
    ts = StratifiedRaySampler(mode).sample(t0, t1, 8)
    assert ts.shape == (2, 5, 8, 1)
    assert (ts >= 1.0).all() and (ts <= 4.0).all() and (ts.diff(dim=-2) >= 0).all()
    edges = {"linear": lambda s: 1 + 3 * s, "geometric": lambda s: 4.0**s, "harmonic": lambda s: 1 / (1 - 0.75 * s)}
    centres = edges[mode](torch.linspace(0, 1, 8))
    mids = torch.cat([torch.tensor([1.0]), (centres[1:] + centres[:-1]) / 2, torch.tensor([4.0])])
    assert ((ts[..., 0] >= mids[:-1] - 1e-5) & (ts[..., 0] <= mids[1:] + 1e-5)).all()
    with pytest.raises(ValueError, match="depth_mode"):
        StratifiedRaySampler("log")


def test_importance_samples_land_where_the_weight_is():
    ts = torch.linspace(0.5, 7.5, 8).view(1, 1, 8, 1)
    weights = torch.zeros(1, 1, 8, 1)
    weights[..., 3, :] = 1.0
    vrange = VolumeRange(t0=torch.zeros(1, 1, 1), t1=torch.full((1, 1, 1), 8.0), intersected=torch.ones(1, 1, 1, dtype=torch.bool))
    torch.manual_seed(0)
    samples = ImportanceRaySampler(vrange, AttrDict(ts=ts, weights=weights), alpha=1e-9).sample(None, None, 64)
    assert samples.shape == (1, 1, 64, 1) and ((samples >= 3) & (samples <= 4)).all()
    torch.manual_seed(0)
    blurred = ImportanceRaySampler(vrange, AttrDict(ts=ts, weights=weights), blur_pool=True, alpha=1e-9).sample(None, None, 256)
    assert ((blurred >= 2) & (blurred <= 5)).all() and (blurred < 3).any() and (blurred > 4).any()


def test_combined_integrals_attenuate_the_far_part():
    def part(value, transmittance, t0, t1):
        vrange = VolumeRange(t0=torch.tensor([[t0]]), t1=torch.tensor([[t1]]), intersected=torch.ones(1, 1, dtype=torch.bool))
        return RayVolumeIntegralResults(output=AttrDict(channels=torch.tensor([[value]]), aux_losses=AttrDict(a=torch.ones(1))),
                                        volume_range=vrange, transmittance=torch.tensor([[transmittance]]))

    near, far = part(0.2, 0.5, 1.0, 2.0), part(0.6, 0.25, 2.0, 3.0)
    both = near.combine(far)
    torch.testing.assert_close(both.output.channels, torch.tensor([[0.2 + 0.5 * 0.6]]))
    torch.testing.assert_close(both.transmittance, torch.tensor([[0.125]]))
    assert float(both.volume_range.t0) == 1.0 and float(both.volume_range.t1) == 3.0
    assert float(both.output.aux_losses.a) == 2.0


def test_nerf_mlp_computes_density_from_position_and_colour_from_direction():
    torch.manual_seed(0)
    model = MLPNeRFModel(d_hidden=8, n_density_layers=2, n_channel_layers=1, zero_out=False)
    position = torch.randn(2, 5, 3)
    direction = torch.nn.functional.normalize(torch.randn(2, 5, 3), dim=-1)
    out = model(Query(position=position, direction=direction))
    h = encode_position("v1", position=position)
    layers = model.density_mlp.affines
    h_density = layers[1](torch.relu(layers[0](h)))
    torch.testing.assert_close(out.density, torch.exp(h_density[..., :1]))
    assert out.channels.shape == (2, 5, 3) and ((out.channels > 0) & (out.channels < 1)).all()
    other = model(Query(position=position, direction=-direction)).channels
    assert not torch.allclose(other, out.channels)  # the colour depends on the view direction
    torch.testing.assert_close(model(Query(position=position, direction=direction)).density, out.density)


def test_nerf_mlp_starts_grey_and_takes_meta_parameters():
    model = MLPNeRFModel(d_hidden=8, n_density_layers=2, meta_parameters=True)
    query = Query(position=torch.randn(1, 4, 3))
    assert torch.equal(model(query).channels, torch.full((1, 4, 3), 0.5))  # zero_out: sigmoid(0)
    params = {"density_mlp.affines.1.bias": torch.full((8,), -50.0), "density_mlp.affines.1.weight": torch.zeros(8, 8)}
    assert torch.allclose(model(query, params=params).density, torch.exp(torch.tensor(-50.0)))


def test_spherical_harmonics_are_zero_without_directions():
    zeros = maybe_get_spherical_harmonics_basis(4, (2, 7, 3))
    assert zeros.shape == (2, 7, 16) and not zeros.any()
    basis = maybe_get_spherical_harmonics_basis(4, (1, 3), torch.tensor([[0.0, 0.0, 1.0]]))
    assert basis.shape == (1, 16) and basis[0, 0] > 0


def test_void_is_the_background_colour_everywhere():
    void = VoidNeRFModel(background=[255, 0, 51])
    out = void(Query(position=torch.zeros(2, 4, 3)))
    assert out.shape == (2, 4, 3) and torch.allclose(out[1, 3], torch.tensor([1.0, 0.0, 0.2]))
    assert "background" in dict(void.named_buffers())
    assert torch.equal(void(Query(position=torch.zeros(1, 3)), params={"background": torch.ones(3)}), torch.ones(1, 3))
    assert "background" in dict(VoidNeRFModel(background=[1, 2, 3], trainable=True).named_parameters())
