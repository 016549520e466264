"""bench/train_steps.py: each training stage of the small recipe takes real optimiser steps on its shapes."""
import math

import pytest
import torch

from bench.stage_types import Context
from bench.stages import STAGE_BY_NAME
from bench.train_steps import SETUPS


@pytest.mark.parametrize("name", ["transmitter", "text", "image"])
def test_train_step_stage_updates_the_recipe_model(name):
    prepared = SETUPS[name](Context(device=torch.device("cpu"), tiny=True))
    model = prepared.run.__self__.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    record = prepared.run()
    assert math.isfinite(record["loss"]) and "skipped" not in record
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "a step changed no weight"
    assert prepared.after(record)["loss"] == round(record["loss"], 4)
    assert STAGE_BY_NAME[f"train_step_{name}"].repeats == 20


def test_train_step_stages_use_the_recipe_shapes():
    prepared = SETUPS["transmitter"](Context(device=torch.device("cpu")))
    assert prepared.info == {"assets_per_step": 16, "n_sdf": 1024, "n_color": 512, "points": 1024, "device": "cpu"}
    # the caption's 24 token states and the colour hint the trainer appends
    text = SETUPS["text"](Context(device=torch.device("cpu")))
    assert text.info["batch_size"] == 32 and text.info["conditions"] == [384, 25] and text.info["latent_probe"] == 0
    assert text.info["device"] == "cpu"
    image = SETUPS["image"](Context(device=torch.device("cpu")))
    assert image.info["conditions"] == [3, 64, 64] and image.info["latent_probe"] == 3.0
