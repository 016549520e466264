"""bench.latent_probe_iou decodes an image prior's regressed latent and scores it against the pictured object."""
import dataclasses
import hashlib

import pytest
import torch
from safetensors.torch import save_file

from bench import latent_probe_iou
from shap_e.data import iter_dataset
from shap_e.models import registry
from shap_e.models.download import load_model


@pytest.mark.slow
def test_a_head_that_always_answers_one_objects_latent_scores_that_object_highest(tmp_path, monkeypatch):
    from shap_e.encoding import encode

    xm = load_model("transmitter-small")
    first, second = iter_dataset("heldout_pairs", 2, 0)
    assert first.category != second.category
    first.mesh.export(tmp_path / "first.ply")
    latent = encode(str(tmp_path / "first.ply"), xm, generator=torch.Generator().manual_seed(0), seed=0)

    prior = load_model("image-small")
    with torch.no_grad():  # the head ignores the picture and answers the first object's latent
        prior.latent_head[-1].weight.zero_()
        prior.latent_head[-1].bias.copy_(latent.reshape(-1))
    weights = tmp_path / "fixed.safetensors"
    save_file({k: v.contiguous() for k, v in prior.state_dict().items()}, str(weights))
    spec = dataclasses.replace(registry.get_spec("image-small"), name="fixed-head", weights_file=str(weights),
                               sha256=hashlib.sha256(weights.read_bytes()).hexdigest())
    monkeypatch.setitem(registry.MODELS, "fixed-head", spec)

    rows = latent_probe_iou.probe_ious("fixed-head", "transmitter-small", "heldout_pairs", 2, 0)
    assert [r["category"] for r in rows] == [first.category, second.category]
    assert rows[0]["iou"] > 0.6 and rows[1]["iou"] < rows[0]["iou"] - 0.2, rows
