"""shap_e/models/generation/pooled_mlp.py: per-point blocks gated by a pooled summary."""
import pytest
import torch

from shap_e.models.configs import model_from_config
from shap_e.models.generation.pooled_mlp import PooledMLP, ResBlock, pool
from shap_e.models.generation.util import timestep_embedding


def test_pool_takes_the_max_or_the_mean_over_the_points():
    x = torch.tensor([[[1.0, 5.0, 3.0], [-2.0, -4.0, 0.0]]])
    assert torch.equal(pool("max", x), torch.tensor([[5.0, 0.0]]))
    torch.testing.assert_close(pool("mean", x), torch.tensor([[3.0, -2.0]]))
    with pytest.raises(ValueError, match="unknown pool op 'sum'"):
        pool("sum", x)
    with pytest.raises(ValueError, match="pool_op='sum' is unknown"):
        ResBlock(4, "sum")


@pytest.mark.parametrize("op", ["max", "mean"])
def test_res_block_adds_the_per_point_body_gated_by_the_pooled_channels(op):
    torch.manual_seed(0)
    block = ResBlock(4, op)
    x = torch.randn(2, 4, 7)
    body = block.body(x.permute(0, 2, 1)).permute(0, 2, 1)
    gate = torch.tanh(block.gate[0](pool(op, x)))
    torch.testing.assert_close(block(x), x + body * gate[..., None])


def test_pooled_mlp_is_equivariant_to_the_point_order_and_starts_at_zero():
    torch.manual_seed(0)
    model = PooledMLP(input_channels=3, output_channels=6, hidden_size=16, resblocks=2)
    x, t = torch.randn(2, 3, 9), torch.tensor([2, 700])
    assert not model(x, t).any()
    torch.nn.init.normal_(model.out.weight)
    out = model(x, t)
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(x[:, :, perm], t), out[:, :, perm], atol=1e-5, rtol=0)
    first = model.input_embed(x) + model.time_embed(timestep_embedding(t, 16))[..., None]
    torch.testing.assert_close(out, model.out(model.sequence(first)))


def test_pooled_mlp_is_built_by_name():
    model = model_from_config({"name": "PooledMLP", "input_channels": 3, "output_channels": 6, "hidden_size": 8,
                               "resblocks": 1, "pool_op": "mean"})
    assert isinstance(model, PooledMLP) and model.sequence[0].pool_op == "mean"
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hidden'\]"):
        model_from_config({"name": "PooledMLP", "hidden": 8})
