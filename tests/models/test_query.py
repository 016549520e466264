"""`Query` copies and maps its tensors, leaving unset ones unset."""
import torch

from shap_e.models.query import Query


def test_copy_and_map_tensors():
    q = Query(position=torch.ones(2, 3), t_min=torch.zeros(2, 1))
    c = q.copy()
    assert c is not q and c.position is q.position and c.direction is None
    doubled = q.map_tensors(lambda t: t * 2)
    assert torch.equal(doubled.position, torch.full((2, 3), 2.0)) and torch.equal(doubled.t_min, q.t_min)
    assert doubled.direction is None and doubled.t_max is None
