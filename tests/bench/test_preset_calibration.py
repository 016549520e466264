"""The preset calibration on the small random-weight text model of golden file d."""
import json

import pytest
import torch

from bench import preset_calibration
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config

STEPS = (8, 32, 64)
REFERENCE_STEPS = 64


@pytest.fixture(scope="module")
def prior(golden):
    from shap_e.models.configs import model_from_config

    d = golden("d")
    model = model_from_config(d["config"]["text_model"])
    model.load_state_dict(d["state_dict"]["text_model"])
    return model.eval(), diffusion_from_config(d["config"]["diffusion"]), d["inputs"]["text_embeddings"]


def _calibrate(prior, threshold=0.05, steps=STEPS):
    model, diffusion, emb = prior
    rows = torch.cat([emb, emb])  # 2 prompts x 2 seeds
    return preset_calibration.calibrate(
        model, diffusion, dict(embeddings=rows), ["a", "a", "b", "b"], [0, 1, 0, 1], steps,
        guidance=3.0, threshold=threshold, reference_steps=REFERENCE_STEPS,
    )


@pytest.fixture(scope="module")
def result(prior):
    return _calibrate(prior)


def test_one_row_per_step_count_with_its_evaluation_count(result):
    assert [r["steps"] for r in result["rows"]] == list(STEPS)
    assert [r["model_evaluations"] for r in result["rows"]] == list(STEPS)
    assert result["reference"]["model_evaluations"] == 2 * REFERENCE_STEPS - 1
    assert all(r["seconds"] > 0 and len(r["relative_rms"]) == 4 for r in result["rows"])


def test_distances_shrink_with_more_steps_and_are_relative_to_the_reference(result):
    worst = [r["relative_rms_max"] for r in result["rows"]]
    assert worst[0] > worst[-1] > 0
    ref_rms = [s["reference_rms"] for s in result["samples"]]
    for row in result["rows"]:
        absolute = [rel * ref for rel, ref in zip(row["relative_rms"], ref_rms)]
        assert max(absolute) == pytest.approx(row["rms_max"], rel=1e-9)


def test_the_pick_is_the_fewest_steps_within_the_threshold(prior, result):
    # Measured on this random-weight model: worst relative RMS 1.14, 0.21, 0.006 at 8, 32, 64 steps.
    middle = result["rows"][1]["relative_rms_max"]
    picked = _calibrate(prior, threshold=middle * 1.001)
    assert picked["chosen_steps"] == STEPS[1]
    assert picked["evaluation_ratio"] == pytest.approx((2 * REFERENCE_STEPS - 1) / STEPS[1])
    none = _calibrate(prior, threshold=1e-9, steps=STEPS[:1])
    assert none["chosen_steps"] is None and "No candidate" in preset_calibration.to_markdown(none)


def test_command_line_writes_json_and_markdown(monkeypatch, tmp_path, prior, capsys):
    model, diffusion, emb = prior
    table = {"a red cube": emb[0], "a chair": emb[1]}

    def cached_model_kwargs(batch_size, kwargs):
        return {"embeddings": torch.stack([table[t] for t in kwargs["texts"]])}

    monkeypatch.setattr(model, "cached_model_kwargs", cached_model_kwargs, raising=False)
    monkeypatch.setattr(preset_calibration, "load_prior", lambda name, device, cache_dir: (model, diffusion))
    paths = preset_calibration.main([
        "--model", "tiny", "--prompts", "a red cube", "a chair", "--seeds", "3", "--steps", "4", "2",
        "--reference-steps", "6", "--out-dir", str(tmp_path), "--threshold", "10",
    ])
    doc = json.loads(paths["json"].read_text())
    assert doc["model"] == "tiny" and doc["chosen_steps"] == 2
    assert [s["label"] for s in doc["samples"]] == ["a red cube", "a chair"]
    markdown = paths["md"].read_text()
    assert "| 2 | 2 |" in markdown and "**2**" in markdown
    assert markdown.strip() in capsys.readouterr().out


def test_bad_threshold_is_rejected(prior):
    model, diffusion, emb = prior
    with pytest.raises(ValueError, match="threshold must be > 0"):
        preset_calibration.calibrate(model, diffusion, dict(embeddings=emb), ["a", "b"], [0, 0], threshold=0)
