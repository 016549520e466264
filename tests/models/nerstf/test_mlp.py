"""The NeRSTF MLP against golden f (SDF/density on the STF grid) and its own contract."""
import pytest
import torch

from shap_e.models.nerstf.mlp import HEADS, NeRSTFMLP
from shap_e.rendering.stf import grid_points
from shap_e.rendering.volume import BoundingBox

GRID = 32


@pytest.fixture(scope="module")
def golden_mlp(golden):
    f = golden("f")
    mlp = NeRSTFMLP(d_hidden=16)
    prefix = "renderer.nerstf."
    mlp.load_state_dict({k[len(prefix):]: v for k, v in f["state_dict"].items() if k.startswith(prefix)}, strict=True)
    params = {k[len("nerstf."):]: v for k, v in f["outputs"]["params"].items()}
    return mlp, params, f


def _grid():
    box = BoundingBox(torch.full((3,), -1.0), torch.full((3,), 1.0))
    return grid_points(torch.arange(GRID**3), GRID, box)


def test_state_dict_keys_match_the_checkpoint_layout_with_meta_weights_as_buffers():
    mlp = NeRSTFMLP(d_hidden=16)
    keys = set(mlp.state_dict())
    assert keys == {f"mlp.{i}.{p}" for i in range(7) for p in ("weight", "bias")}
    buffers = {name for name, _ in mlp.named_buffers()}
    assert buffers == {f"mlp.{i}.weight" for i in range(4)}
    assert mlp.mlp[4].weight.shape == (16, 16 + 51) and mlp.mlp[6].weight.shape == (12, 16)


def test_sdf_and_density_on_the_grid_match_golden_exactly(golden_mlp):
    mlp, params, f = golden_mlp
    with torch.no_grad():
        out = mlp.query(_grid()[None], params, heads=("sdf", "density_fine"))
    stf = f["outputs"]["stf"]
    torch.testing.assert_close(out.sdf, stf["raw_signed_distance"], atol=1e-6, rtol=0)
    torch.testing.assert_close(out.density_fine, stf["raw_density"], atol=1e-6, rtol=0)


def test_only_requested_heads_are_returned_with_their_activations(golden_mlp):
    mlp, params, _ = golden_mlp
    points = _grid()[None, :500]
    with torch.no_grad():
        some = mlp.query(points, params, heads=("color_stf",))
        everything = mlp.query(points, params, heads=tuple(HEADS))
    assert some.sdf is None and some.density_fine is None
    assert some.color_stf.shape == (1, 500, 3)
    torch.testing.assert_close(some.color_stf, everything.color_stf, atol=0, rtol=0)
    assert everything.sdf.abs().max() <= 1 and everything.density_coarse.min() >= 0
    for name in ("color_stf", "color_coarse", "color_fine"):
        assert 0 <= getattr(everything, name).min() and getattr(everything, name).max() <= 1


def test_latent_weights_replace_the_stored_meta_weights(golden_mlp):
    mlp, params, _ = golden_mlp
    points = _grid()[None, :200]
    with torch.no_grad():
        with_params = mlp.query(points, params, heads=("sdf",)).sdf
        with_buffers = mlp.query(points, {}, heads=("sdf",)).sdf
        scaled = mlp.query(points, {**params, "mlp.1.weight": 2 * params["mlp.1.weight"]}, heads=("sdf",)).sdf
    assert not torch.allclose(with_params, with_buffers)
    assert not torch.allclose(with_params, scaled)


def test_direction_changes_only_direction_dependent_outputs_and_none_equals_no_direction(golden_mlp):
    mlp, params, _ = golden_mlp
    points = _grid()[None, :200]
    direction = torch.nn.functional.normalize(torch.randn(1, 200, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    with torch.no_grad():
        plain = mlp.query(points, params, heads=("color_fine",)).color_fine
        again = mlp.query(points, params, None, heads=("color_fine",)).color_fine
        lit = mlp.query(points, params, direction, heads=("color_fine",)).color_fine
    torch.testing.assert_close(plain, again, atol=0, rtol=0)
    assert (plain - lit).abs().max() > 1e-4


def test_per_sample_weights_are_applied_per_batch_element(golden_mlp):
    mlp, params, _ = golden_mlp
    points = _grid()[None, :100]
    other = {k: v.flip(1) for k, v in params.items()}
    batched = {k: torch.cat([params[k], other[k]]) for k in params}
    with torch.no_grad():
        both = mlp.query(points.expand(2, -1, -1), batched, heads=("sdf",)).sdf
        first = mlp.query(points, params, heads=("sdf",)).sdf
        second = mlp.query(points, other, heads=("sdf",)).sdf
    torch.testing.assert_close(both, torch.cat([first, second]), atol=1e-6, rtol=0)


def test_bad_heads_and_positions_raise_clear_errors(golden_mlp):
    mlp, params, _ = golden_mlp
    with pytest.raises(ValueError, match="heads must be"):
        mlp.query(torch.zeros(1, 4, 3), params, heads=("colour",))
    with pytest.raises(ValueError, match="position must be"):
        mlp.query(torch.zeros(4, 3), params)
    with pytest.raises(ValueError, match="insert_direction_at"):
        NeRSTFMLP(d_hidden=8, n_meta_layers=5, insert_direction_at=4)


def test_building_the_mlp_draws_only_its_own_initialisation():
    """Seeded training runs build their model first: the latent-generated (meta) layers must draw
    nothing, the ordinary linears their default initialisation, then `_init_weights` one normal per
    weight of each layer, so that a recipe's runs stay what they were."""
    from shap_e.models.nerstf.mlp import NeRSTFMLP

    torch.manual_seed(0)
    mlp = NeRSTFMLP(d_hidden=8, position_degrees=2)
    after_build = torch.rand(4)
    torch.manual_seed(0)
    for layer in mlp.mlp[mlp.n_meta_layers:]:
        torch.nn.Linear(layer.in_features, layer.out_features)
    for layer in mlp.mlp:
        torch.empty_like(layer.weight).normal_()
    assert torch.equal(torch.rand(4), after_build)
