"""Evaluation runs end to end on tiny models with random weights: structure and ranges, not quality."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.data import HELDOUT_PAIRS, iter_dataset
from shap_e.eval.classify import build_classifier
from shap_e.eval.report import write_results
from shap_e.eval.run import (
    evaluate_ground_truth,
    evaluate_image_to_3d,
    evaluate_reconstruction,
    evaluate_text_to_3d,
    heldout_prompts,
    picture,
)
from shap_e.eval.settings import EvalSettings, Judges
from shap_e.models.configs import model_from_config


@pytest.fixture(scope="module")
def transmitter(golden):
    e = golden("e")
    model = model_from_config(e["config"]).eval()
    model.load_state_dict(e["state_dict"])
    return model


class StubPrior(torch.nn.Module):
    """A conditional latent model with the prior's interface that records what it was asked for."""

    def __init__(self, d_latent: int, conditioning: str):
        super().__init__()
        self.d_latent, self.conditioning = d_latent, conditioning
        self.bias = torch.nn.Parameter(torch.full((d_latent,), 0.1))
        self.seen = []

    def cached_model_kwargs(self, batch_size, model_kwargs):
        self.seen += list(model_kwargs["texts" if self.conditioning == "text" else "images"])
        return {"embeddings": torch.ones(batch_size, 4)}

    def forward(self, x, t, embeddings=None):
        x0 = self.bias.expand_as(x) * embeddings[:, :1]
        return torch.cat([x0, torch.zeros_like(x)], dim=1)


@pytest.fixture(scope="module")
def small_classifier():
    return build_classifier(per_proportion=1, resolution=16)


@pytest.fixture(scope="module")
def judges(small_classifier):
    return Judges(small_classifier)


SAMPLING = EvalSettings(steps=2, batch_size=2, grid_size=16)


def test_reconstruction_runs_end_to_end_and_is_reproducible(transmitter, small_classifier, judges):
    assets = list(iter_dataset("heldout_pairs", 2, seed=0))
    settings = EvalSettings(grid_size=16, resolution=16, n_samples=500)
    result = evaluate_reconstruction(transmitter, assets, settings, judges=judges)
    again = evaluate_reconstruction(transmitter, assets, settings, judges=judges)
    assert result["task"] == "reconstruction" and len(result["rows"]) == 2
    assert result["rows"] == again["rows"]
    for row, asset in zip(result["rows"], assets):
        assert row["category"] == asset.category and 0.0 <= row["iou"] <= 1.0
        assert row["n_faces"] == 0 or (row["chamfer"] > 0 and 0.0 <= row["color_error"] <= 1.0)
        assert row["category_correct"] == (row["pred_category"] == asset.category)
        assert row["n_faces"] == 0 or row["pred_category"] in small_classifier.labels
    summary = result["summary"]
    assert summary["n"] == 2 and 0.0 <= summary["iou"] <= 1.0 and summary["iou"] < 0.85  # random weights
    assert result["settings"] == dict(n=2, grid_size=16, resolution=16, n_samples=500, seed=0, refine_steps=0,
                                      vertex_placement="reference")
    iou = result["intervals"]["iou"]
    assert iou["method"] == "bootstrap" and iou["low"] <= summary["iou"] <= iou["high"]
    assert result["intervals"]["category_correct"]["method"] == "wilson"


def test_text_to_3d_judges_one_mesh_per_prompt(transmitter, judges):
    prompts = heldout_prompts("heldout_pairs", 3, seed=0)
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "text")
    result = evaluate_text_to_3d(prior, transmitter, prompts, replace(SAMPLING, seed=7), judges=judges)
    assert prior.seen == [p.prompt for p in prompts]
    assert [r["prompt"] for r in result["rows"]] == [p.prompt for p in prompts]
    assert [r["seed"] for r in result["rows"]] == [7, 8, 9]
    for row, p in zip(result["rows"], prompts):
        assert (row["category"], row["colour"]) == (p.category, p.colour)
        assert row["category_correct"] == (row["pred_category"] == p.category)
    for key in ("category_correct", "colour_correct"):
        assert 0.0 <= result["summary"][key] <= 1.0


def test_text_to_3d_accepts_label_tuples_and_records_its_settings(transmitter, judges):
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "text")
    result = evaluate_text_to_3d(prior, transmitter, [("a red cube", "cube", "red")], SAMPLING, judges=judges)
    assert result["rows"][0]["category"] == "cube"
    assert result["settings"] == dict(n=1, guidance_scale=15.0, guidance_max_sigma=None, steps=2, sampler="heun",
                                      batch_size=2, grid_size=16, vertex_placement="reference", seed=0,
                                      classifier_resolution=16)
    limited = evaluate_text_to_3d(prior, transmitter, [("a red cube", "cube", "red")],
                                  replace(SAMPLING, guidance_max_sigma=5.0), judges=judges)
    assert limited["settings"]["guidance_max_sigma"] == 5.0


def test_text_to_3d_splits_accuracy_by_heldout_synonyms(transmitter, judges):
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "text")
    prompts = [("behold: a jade globe", "sphere", "green"), ("a jade cube", "cube", "green"),
               ("a red cuboid", "cube", "red")]
    result = evaluate_text_to_3d(prior, transmitter, prompts, SAMPLING, judges=judges)
    rows, summary = result["rows"], result["summary"]
    assert [r["heldout_colour_word"] for r in rows] == [True, True, False]
    assert [r["heldout_category_word"] for r in rows] == [True, False, True]
    assert (summary["n_colour_heldout_word"], summary["n_colour_training_word"]) == (2, 1)
    assert summary["colour_correct_heldout_word"] == (rows[0]["colour_correct"] + rows[1]["colour_correct"]) / 2
    assert summary["colour_correct_training_word"] == float(rows[2]["colour_correct"])
    assert summary["category_correct_training_word"] == float(rows[1]["category_correct"])
    assert result["intervals"]["colour_correct_heldout_word"]["method"] == "wilson"
    pairs_only = evaluate_text_to_3d(prior, transmitter, prompts[2:], SAMPLING, judges=judges)
    assert pairs_only["summary"]["n_colour_heldout_word"] == 0
    assert pairs_only["summary"]["colour_correct_heldout_word"] is None
    assert "colour_correct_heldout_word" not in pairs_only["intervals"]


def test_extra_judges_judge_the_same_meshes(transmitter, small_classifier, judges):
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "text")
    cubes_only = build_classifier(per_proportion=1, resolution=16, categories=["cube"])
    extra = Judges(small_classifier, {"same": small_classifier, "cubes": cubes_only})
    prompts = heldout_prompts("heldout_pairs", 3, seed=0)
    result = evaluate_text_to_3d(prior, transmitter, prompts, SAMPLING, judges=extra)
    plain = evaluate_text_to_3d(prior, transmitter, prompts, SAMPLING, judges=judges)
    for row, plain_row in zip(result["rows"], plain["rows"]):
        assert {k: v for k, v in row.items() if not k.endswith(("_same", "_cubes"))} == plain_row
        assert (row["pred_category_same"], row["category_correct_same"]) == (row["pred_category"],
                                                                              row["category_correct"])
        assert row["pred_category_cubes"] in ("cube", None)
        assert row["category_correct_cubes"] == (row["category"] == "cube" and row["n_faces"] > 0)
    summary = result["summary"]
    assert summary["category_correct_same"] == summary["category_correct"]
    assert summary["category_correct_cubes"] == round(np.mean([r["category_correct_cubes"] for r in result["rows"]]), 4)
    assert result["intervals"]["category_correct_cubes"]["method"] == "wilson"
    # On the ground truth a judge that knows only cubes is right exactly on the cubes.
    assets = list(iter_dataset("heldout_pairs", 12, seed=4))
    truth = evaluate_ground_truth("heldout_pairs", 12, seed=4, judges=Judges(small_classifier, {"cubes": cubes_only}))
    assert truth["summary"]["category_correct_cubes"] == round(np.mean([a.category == "cube" for a in assets]), 4)
    recon = evaluate_reconstruction(transmitter, assets[:1], EvalSettings(grid_size=16, resolution=16, n_samples=200),
                                    judges=Judges(small_classifier, {"same": small_classifier}))
    row = recon["rows"][0]
    assert (row["pred_category_same"], row["category_correct_same"]) == (row["pred_category"], row["category_correct"])
    assert recon["summary"]["category_correct_same"] == recon["summary"]["category_correct"]


def test_image_to_3d_conditions_on_a_picture_of_each_asset(transmitter, judges):
    assets = list(iter_dataset("heldout_pairs", 2, seed=3))
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "image_grid")
    result = evaluate_image_to_3d(prior, transmitter, assets, replace(SAMPLING, resolution=16), judges=judges,
                                  image_fn=lambda a: picture(a, size=32))
    assert len(prior.seen) == 2 and all(isinstance(im, Image.Image) and im.size == (32, 32) for im in prior.seen)
    assert [r["category"] for r in result["rows"]] == [a.category for a in assets]
    assert all(0.0 <= r["iou"] <= 1.0 for r in result["rows"])
    assert result["settings"]["guidance_scale"] == 3.0 and result["settings"]["resolution"] == 16


def test_image_to_3d_starts_from_the_regressed_latent_below_strength_one(transmitter, judges):
    assets = list(iter_dataset("heldout_pairs", 2, seed=3))
    prior = StubPrior(transmitter.encoder.latent_ctx * transmitter.encoder.d_latent, "image_grid")
    asked = []

    def regress_latent(batch_size, model_kwargs):
        asked.append(len(model_kwargs["images"]))
        return torch.zeros(batch_size, prior.d_latent)

    prior.regress_latent = regress_latent
    options = dict(judges=judges, image_fn=lambda a: picture(a, size=32))
    settings = replace(SAMPLING, resolution=16)
    assert evaluate_image_to_3d(prior, transmitter, assets, settings, **options)["settings"]["init_strength"] == 1.0
    assert asked == []
    result = evaluate_image_to_3d(prior, transmitter, assets, replace(settings, init_strength=0.5), **options)
    assert asked == [2] and result["settings"]["init_strength"] == 0.5


def test_picture_shows_the_object_in_its_colour_on_white():
    asset = next(iter(iter_dataset("heldout_pairs", 1, seed=0)))
    pixels = torch.tensor(np.asarray(picture(asset, size=48))).reshape(-1, 3).float()  # [H*W, 3]
    background = (pixels == 255).all(dim=1)
    assert 0.1 < background.float().mean() < 0.95
    assert (pixels[~background].mean(0) - pixels[background].mean(0)).abs().max() > 20


def test_heldout_prompts_carry_the_split_labels():
    prompts = heldout_prompts("heldout_pairs", 8, seed=0)
    assert all((p.category, p.colour) in HELDOUT_PAIRS for p in prompts)
    assert all(p.prompt for p in prompts)


def test_ground_truth_evaluation_is_perfect_on_a_few_assets(judges):
    result = evaluate_ground_truth("heldout_pairs", 12, seed=4, judges=judges)
    assert result["summary"]["colour_correct"] == 1.0
    assert result["summary"]["category_correct"] >= 0.9


def test_results_are_written_as_json_and_markdown(tmp_path, judges):
    result = evaluate_ground_truth("heldout_pairs", 3, seed=0, judges=judges)
    json_path, md_path = write_results(result, tmp_path / "cards" / "gt.json", title="ground truth")
    assert json.loads(json_path.read_text()) == result
    text = md_path.read_text()
    assert text.startswith("# ground truth") and "| category_correct |" in text
    assert text.count("\n| ") >= 3 + len(result["summary"])
    assert sorted(p.name for p in json_path.parent.iterdir()) == ["gt.json", "gt.md"]  # no temp files left
    with pytest.raises(ValueError, match=r"\.json"):
        write_results(result, tmp_path / "gt.txt")
