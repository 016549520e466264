"""Meta modules: per-call tensors override registered defaults; dotted-key dict helpers."""
import torch
import torch.nn as nn

from shap_e.models.nn.meta import (
    MetaModule,
    batch_meta_parameters,
    batch_meta_state_dict,
    leveldict,
    leveliter,
    subdict,
    superdict,
)


def test_subdict_and_superdict_strip_and_add_a_dotted_prefix():
    d = {"mlp.0.weight": 1, "mlp.0.bias": 2, "mlp.1.weight": 3, "mlp0.weight": 4, "other": 5}
    assert dict(subdict(d, "mlp.0")) == {"weight": 1, "bias": 2}
    assert dict(subdict(d, "mlp")) == {"0.weight": 1, "0.bias": 2, "1.weight": 3}
    assert subdict(d, "") is d and subdict(d) is d and subdict(None, "x") is None
    assert dict(superdict(subdict(d, "mlp.0"), "mlp.0")) == {"mlp.0.weight": 1, "mlp.0.bias": 2}
    assert superdict(d, None) is d and superdict(None, "x") is None
    assert subdict(d, "mlp.0").weight == 1  # an AttrDict


def test_leveldict_keeps_the_keys_at_one_depth():
    d = {"a": 1, "b.c": 2, "b.d.e": 3, "f.g": 4}
    assert list(leveliter(d)) == [("a", 1)]
    assert dict(leveldict(d, depth=1)) == {"b.c": 2, "f.g": 4}
    assert dict(leveldict(d, 2)) == {"b.d.e": 3}


class _Net(MetaModule):
    def __init__(self):
        super().__init__()
        self.register_meta_parameter("scale", nn.Parameter(torch.ones(3)))
        self.register_meta_buffer("weight", nn.Parameter(torch.full((2, 3), 2.0)))
        self.register("bias", nn.Parameter(torch.zeros(2)), meta=False)
        self.register("count", torch.zeros(1), meta=False, trainable=False)
        self.child = nn.Linear(3, 2)


def test_meta_registration_decides_what_is_listed_where():
    net = _Net()
    assert [n for n, _ in net.named_meta_parameters()] == ["scale"]
    assert [n for n, _ in net.named_nonmeta_parameters()] == ["bias", "child.weight", "child.bias"]
    assert len(list(net.nonmeta_parameters())) == 3
    assert sorted(net.meta_state_dict()) == ["scale", "weight"]
    assert net.meta_state_dict()["scale"].requires_grad  # not detached, unlike state_dict
    assert "weight" in net.state_dict() and "weight" not in dict(net.named_parameters())
    net.register_meta("shift", nn.Parameter(torch.zeros(3)), trainable=False)
    assert "shift" in dict(net.named_buffers()) and "shift" in net.meta_state_dict()


def test_update_fills_missing_params_from_the_module():
    net = _Net()
    given = torch.zeros(4, 2, 3)
    params = net.update({"weight": given})
    assert params.weight is given
    assert params.scale is net.scale and params["child.weight"] is net.child.weight
    assert torch.equal(params.count, torch.zeros(1)) and not params.count.requires_grad
    assert not net.update()["weight"].requires_grad  # buffers are detached defaults
    assert net.meta_tensor({"weight": given}, "weight") is given and net.meta_tensor(None, "scale") is net.scale
    assert torch.equal(net.meta_tensor({}, "weight"), net.weight) and not net.meta_tensor({}, "weight").requires_grad


def test_batch_meta_tensors_are_repeated_copies():
    net = _Net()
    params = batch_meta_parameters(net, 4)
    assert list(params) == ["scale"] and params.scale.shape == (4, 3)
    state = batch_meta_state_dict(net, 2)
    assert state.weight.shape == (2, 2, 3) and torch.equal(state.weight[1], net.weight)
    state.weight[0].zero_()
    assert torch.equal(net.weight, torch.full((2, 3), 2.0))
