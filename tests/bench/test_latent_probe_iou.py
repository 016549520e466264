"""bench.latent_probe_iou reads the probe from a training checkpoint and scores its decoded latent."""
import pytest
import torch

from bench import latent_probe_iou
from shap_e.data import iter_dataset
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.models.configs import model_from_config
from shap_e.models.download import load_config, load_model
from shap_e.train.diffusion_training import LatentProbeObjective
from shap_e.train.run import read_config

CONFIG = "shap_e/configs/image_small_config.yaml"


@pytest.mark.slow
def test_a_probe_that_always_answers_one_objects_latent_scores_that_object_highest(tmp_path):
    from shap_e.encoding import encode

    xm = load_model("transmitter-small")
    first, second = iter_dataset("heldout_pairs", 2, 0)
    assert first.category != second.category
    first.mesh.export(tmp_path / "first.ply")
    latent = encode(str(tmp_path / "first.ply"), xm, generator=torch.Generator().manual_seed(0), seed=0)

    torch.manual_seed(0)
    objective = LatentProbeObjective(model_from_config(read_config(CONFIG)),
                                     diffusion_from_config(load_config("diffusion-small")), 1.0)
    with torch.no_grad():  # the probe ignores the picture and answers the first object's latent
        objective.probe[-1].weight.zero_()
        objective.probe[-1].bias.copy_(latent.reshape(-1))
    torch.save({"model": objective.state_dict()}, tmp_path / "checkpoint.pt")

    rows = latent_probe_iou.probe_ious(str(tmp_path / "checkpoint.pt"), CONFIG, "transmitter-small",
                                       "heldout_pairs", 2, 0)
    assert [r["category"] for r in rows] == [first.category, second.category]
    assert rows[0]["iou"] > 0.6 and rows[1]["iou"] < rows[0]["iou"] - 0.2, rows
