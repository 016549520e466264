"""Building a model from a config draws its random initial values in a fixed order.

Seeded training runs build their model first, so the order in which parameters are drawn decides the
trained weights: a recipe gives its recorded output only while this order stays. The expected orders
(`init_order/<config>.json`) list, for the configs the recipes train from scratch, each parameter
in the order its first random draw happens; they were recorded when the bundled weights were trained.
"""
import json
from pathlib import Path
from typing import List

import pytest
import torch
import torch.nn as nn
import yaml

from shap_e.models.configs import model_from_config

CONFIGS = Path(__file__).resolve().parents[2] / "shap_e" / "configs"
EXPECTED = Path(__file__).with_name("init_order")
DRAWING_INITS = ("normal_", "uniform_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
                 "trunc_normal_")
DRAWING_METHODS = ("normal_", "uniform_")


def draw_order(config: dict, monkeypatch) -> List[str]:
    """The parameter and buffer names of the built model, in the order of their first random draw."""
    drawn = []

    def logging(fn):
        def draw(tensor, *args, **kwargs):
            if not tensor.is_meta:
                drawn.append(tensor.data_ptr())
            return fn(tensor, *args, **kwargs)
        return draw

    for name in DRAWING_INITS:
        monkeypatch.setattr(nn.init, name, logging(getattr(nn.init, name)))
    for name in DRAWING_METHODS:
        monkeypatch.setattr(torch.Tensor, name, logging(getattr(torch.Tensor, name)))
    model = model_from_config(config, device="cpu")
    monkeypatch.undo()
    names = {}
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        names.setdefault(tensor.data_ptr(), name)
    order = []
    for pointer in drawn:
        name = names.get(pointer, "<a tensor the model does not keep>")
        if not order or order[-1] != name:
            order.append(name)
    return order


@pytest.mark.parametrize("config_name", ["transmitter_small_config", "text_small_config", "image_small_config"])
def test_parameters_are_drawn_in_the_order_the_bundled_weights_were_trained_with(config_name, monkeypatch):
    config = yaml.safe_load((CONFIGS / f"{config_name}.yaml").read_text())
    expected = json.loads((EXPECTED / f"{config_name}.json").read_text())
    assert draw_order(config, monkeypatch) == expected
