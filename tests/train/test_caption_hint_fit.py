import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from shap_e.cli import main
from shap_e.models.caption_hint import CaptionHint
from shap_e.models.configs import model_from_config
from shap_e.train.caption_hint_fit import HintFitConfig, caption_hint_data, fit_hint, hinted_dataset
from shap_e.train.diffusion_training import LatentDataset

from tests.models.test_caption_hint import HINT_PRIOR, TWO_HINT_PRIOR


def colour_grids(n=64, seed=0):
    """`[n, 16, 3]` caption grids whose middle token names one of 4 colours (plus noise), one padded
    token, and the `[n]` labels."""
    grids, labels, _ = labelled_grids(n, seed)
    return grids, labels


def labelled_grids(n=64, seed=0):
    """`[n, 16, 3]` caption grids: a first token naming one of 5 categories, a middle token naming one
    of 4 colours (each plus noise), one padded token; the `[n]` colour and category labels."""
    g = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, 4, (n,), generator=g)
    colour_words = torch.randn(4, 16, generator=g)
    grids = torch.zeros(n, 16, 3)
    grids[:, :, 0] = torch.randn(16, generator=g)  # the same first word everywhere
    grids[:, :, 1] = colour_words[colours] + 0.3 * torch.randn(n, 16, generator=g)
    categories = torch.randint(0, 5, (n,), generator=g)
    grids[:, :, 0] += torch.randn(5, 16, generator=g)[categories]
    return grids, colours, categories


def test_fit_learns_the_colour_deterministically_and_leaves_the_global_random_state_alone():
    grids, labels = colour_grids()
    config = HintFitConfig(steps=60, batch_size=32, lr=3e-2)
    torch.manual_seed(7)
    expected_next = torch.rand(2)
    torch.manual_seed(7)
    first = CaptionHint(16, 4)
    accuracy = fit_hint(first, grids, labels, config, progress=False)
    assert torch.equal(torch.rand(2), expected_next)
    assert accuracy == 1.0
    assert (first(grids).argmax(-1) == labels).all()
    assert not any(p.requires_grad for p in first.parameters())
    second = CaptionHint(16, 4)
    fit_hint(second, grids, labels, config, progress=False)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)


def test_hinted_dataset_appends_the_fitted_hint_to_every_grid():
    grids, labels = colour_grids()
    dataset = LatentDataset(torch.randn(64, 32), grids, {"stage": "text"}, labels)
    hint = CaptionHint(16, 4)
    hinted, accuracy = hinted_dataset([hint], dataset, 4, [HintFitConfig(steps=60, batch_size=32, lr=3e-2)],
                                      progress=False)
    assert accuracy == {"colour_hint_accuracy": 1.0}
    assert hinted.conditions.shape == (64, 16, 4)
    assert torch.equal(hinted.conditions[:, :, :3], grids)
    assert torch.equal(hinted.conditions[:, :4, 3].argmax(-1), labels)
    assert torch.equal(hinted.latents, dataset.latents) and hinted.provenance == dataset.provenance


def test_hinted_dataset_fits_each_hint_to_its_own_labels_and_appends_colour_then_category():
    grids, colours, categories = labelled_grids()
    dataset = LatentDataset(torch.randn(64, 32), grids, {"stage": "text"}, colours, categories)
    hints = [CaptionHint(16, 4), CaptionHint(16, 5, "category")]
    fit = HintFitConfig(steps=80, batch_size=32, lr=3e-2)
    hinted, accuracy = hinted_dataset(hints, dataset, 5, [fit, fit], progress=False)
    assert accuracy == {"colour_hint_accuracy": 1.0, "category_hint_accuracy": 1.0}
    assert hinted.conditions.shape == (64, 16, 5)
    assert torch.equal(hinted.conditions[:, :, :3], grids)
    assert torch.equal(hinted.conditions[:, :4, 3].argmax(-1), colours)
    assert torch.equal(hinted.conditions[:, :5, 4].argmax(-1), categories)
    assert torch.equal(hinted.categories, categories) and torch.equal(hinted.colours, colours)
    alone = CaptionHint(16, 4)
    hinted_dataset([alone], dataset, 4, [fit], progress=False)
    assert torch.equal(alone.out.weight, hints[0].out.weight)  # the category's fit leaves the colour's as it is


@pytest.mark.parametrize("conditions, colours, message", [
    (torch.zeros(4, 16, 4), torch.zeros(4, dtype=torch.long), r"trains on caption grids of 3 tokens .* --text-tokens 3"),
    (torch.zeros(4, 16), torch.zeros(4, dtype=torch.long), "trains on caption grids of 3 tokens"),
    (torch.zeros(4, 16, 3), None, r"the latents have no colour labels \(`colours`\) for the colour hint"),
    (torch.zeros(4, 16, 3), torch.tensor([0, 1, 2, 4]), "colour labels run from 0 to 4; .* colour_hint has 4 classes"),
])
def test_data_the_hint_cannot_be_fitted_to_is_refused(conditions, colours, message):
    dataset = LatentDataset(torch.zeros(4, 32), conditions, {}, colours)
    with pytest.raises(ValueError, match=message):
        hinted_dataset([CaptionHint(16, 4)], dataset, 4, [HintFitConfig()], progress=False)


@pytest.mark.parametrize("categories, message", [
    (None, r"the latents have no category labels \(`categories`\) for the category hint"),
    (torch.tensor([0, 1, 2, 5]), "category labels run from 0 to 5; .* category_hint has 5 classes"),
])
def test_data_without_fitting_category_labels_is_refused_for_a_category_hint(categories, message):
    dataset = LatentDataset(torch.zeros(4, 32), torch.zeros(4, 16, 3), {}, torch.zeros(4, dtype=torch.long), categories)
    hints = [CaptionHint(16, 4), CaptionHint(16, 5, "category")]
    with pytest.raises(ValueError, match=message):
        hinted_dataset(hints, dataset, 5, [HintFitConfig()] * 2, progress=False)


def test_fit_settings_without_a_hint_or_with_unknown_keys_are_refused():
    dataset = LatentDataset(torch.zeros(4, 32), torch.zeros(4, 16, 3), {}, torch.zeros(4, dtype=torch.long))
    plain = model_from_config(dict(HINT_PRIOR, colour_hint=None, inner=dict(HINT_PRIOR["inner"], grid_tokens=3)))
    assert caption_hint_data(plain, dataset, {}) == (dataset, {})
    with pytest.raises(ValueError, match="the model config has no colour_hint"):
        caption_hint_data(plain, dataset, {"colour_hint_fit": {"steps": 5}})
    with pytest.raises(ValueError, match="category_hint_fit fits a prior's category hint; the model config has no "
                                         "category_hint"):
        caption_hint_data(model_from_config(HINT_PRIOR), dataset, {"category_hint_fit": {}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['step'\] in the colour_hint_fit config"):
        caption_hint_data(model_from_config(HINT_PRIOR), dataset, {"colour_hint_fit": {"step": 5}})
    with pytest.raises(ValueError, match="a hint fit needs steps and batch_size of at least 1"):
        HintFitConfig(steps=0)
    with pytest.raises(ValueError, match="a hint fit needs lr > 0"):
        HintFitConfig(lr=0)


def hint_training_config(tmp_path, model=HINT_PRIOR, **train):
    grids, colours, categories = labelled_grids(n=16)
    LatentDataset(torch.tanh(torch.randn(16, 32, generator=torch.Generator().manual_seed(1))), grids,
                  {"stage": "text"}, colours, categories).save(tmp_path / "grids.safetensors")
    fit = {"steps": 60, "batch_size": 16, "lr": 3e-2}
    config = {"model": model, "diffusion": {"schedule": "exp", "timesteps": 32, "mean_type": "x_start"},
              "data": str(tmp_path / "grids.safetensors"), "batch_size": 4,
              "colour_hint_fit": fit, **({"category_hint_fit": fit} if "category_hint" in model else {}),
              "train": {"steps": 3, "lr": 1e-3, "out_dir": str(tmp_path / "run"), "progress": False, **train}}
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def read_metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_text_training_fits_the_hint_first_and_exports_it_with_the_prior(tmp_path):
    assert main(["train", "text", "--config", str(hint_training_config(tmp_path, ema_decay=0.99))]) == 0
    state = load_file(str(tmp_path / "run" / "model.safetensors"))
    prior = model_from_config(HINT_PRIOR)
    prior.load_state_dict(state, strict=True)
    dataset = LatentDataset.load(tmp_path / "grids.safetensors")
    assert torch.equal(prior.colour_hint(dataset.conditions).argmax(-1), dataset.colours)
    records = read_metrics(tmp_path / "run")
    assert [r["colour_hint_accuracy"] for r in records if "colour_hint_accuracy" in r] == [1.0]


def test_text_training_fits_both_hints_and_exports_them_with_the_prior(tmp_path):
    assert main(["train", "text", "--config", str(hint_training_config(tmp_path, TWO_HINT_PRIOR))]) == 0
    prior = model_from_config(TWO_HINT_PRIOR)
    prior.load_state_dict(load_file(str(tmp_path / "run" / "model.safetensors")), strict=True)
    dataset = LatentDataset.load(tmp_path / "grids.safetensors")
    assert torch.equal(prior.colour_hint(dataset.conditions).argmax(-1), dataset.colours)
    assert torch.equal(prior.category_hint(dataset.conditions).argmax(-1), dataset.categories)
    logged = [r for r in read_metrics(tmp_path / "run") if "category_hint_accuracy" in r]
    assert logged == [{"colour_hint_accuracy": 1.0, "category_hint_accuracy": 1.0}]


@pytest.mark.slow
def test_a_hint_prior_trains_on_two_processes_each_fitting_the_same_hint(tmp_path, torchrun):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert main(["train", "text", "--config", str(hint_training_config(one, TWO_HINT_PRIOR))]) == 0
    torchrun("-m", "shap_e", "train", "text", "--config", str(hint_training_config(two, TWO_HINT_PRIOR)))
    assert [r["environment"]["world_size"] for r in read_metrics(two / "run") if "environment" in r] == [2]
    a, b = load_file(str(one / "run" / "model.safetensors")), load_file(str(two / "run" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in (k for k in a if k.startswith(("colour_hint.", "category_hint."))):
        assert torch.equal(a[key], b[key]), key
