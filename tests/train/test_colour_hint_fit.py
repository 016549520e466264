import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from shap_e.cli import main
from shap_e.models.colour_hint import ColourHint
from shap_e.models.configs import model_from_config
from shap_e.train.colour_hint_fit import ColourHintFitConfig, colour_hint_data, fit_colour_hint, hinted_dataset
from shap_e.train.diffusion_training import LatentDataset

from tests.models.test_colour_hint import HINT_PRIOR


def colour_grids(n=64, seed=0):
    """`[n, 16, 3]` caption grids whose middle token names one of 4 colours (plus noise), one padded
    token, and the `[n]` labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    words = torch.randn(4, 16, generator=g)
    grids = torch.zeros(n, 16, 3)
    grids[:, :, 0] = torch.randn(16, generator=g)  # the same first word everywhere
    grids[:, :, 1] = words[labels] + 0.3 * torch.randn(n, 16, generator=g)
    return grids, labels


def test_fit_learns_the_colour_deterministically_and_leaves_the_global_random_state_alone():
    grids, labels = colour_grids()
    config = ColourHintFitConfig(steps=60, batch_size=32, lr=3e-2)
    torch.manual_seed(7)
    expected_next = torch.rand(2)
    torch.manual_seed(7)
    first = ColourHint(16, 4)
    accuracy = fit_colour_hint(first, grids, labels, config, progress=False)
    assert torch.equal(torch.rand(2), expected_next)
    assert accuracy == 1.0
    assert (first(grids).argmax(-1) == labels).all()
    assert not any(p.requires_grad for p in first.parameters())
    second = ColourHint(16, 4)
    fit_colour_hint(second, grids, labels, config, progress=False)
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)


def test_hinted_dataset_appends_the_fitted_hint_to_every_grid():
    grids, labels = colour_grids()
    dataset = LatentDataset(torch.randn(64, 32), grids, {"stage": "text"}, labels)
    hint = ColourHint(16, 4)
    hinted, accuracy = hinted_dataset(hint, dataset, 4, ColourHintFitConfig(steps=60, batch_size=32, lr=3e-2),
                                      progress=False)
    assert accuracy == 1.0
    assert hinted.conditions.shape == (64, 16, 4)
    assert torch.equal(hinted.conditions[:, :, :3], grids)
    assert torch.equal(hinted.conditions[:, :4, 3].argmax(-1), labels)
    assert torch.equal(hinted.latents, dataset.latents) and hinted.provenance == dataset.provenance


@pytest.mark.parametrize("conditions, colours, message", [
    (torch.zeros(4, 16, 4), torch.zeros(4, dtype=torch.long), r"trains on caption grids of 3 tokens .* --text-tokens 3"),
    (torch.zeros(4, 16), torch.zeros(4, dtype=torch.long), "trains on caption grids of 3 tokens"),
    (torch.zeros(4, 16, 3), None, "the latents have no colour labels"),
    (torch.zeros(4, 16, 3), torch.tensor([0, 1, 2, 4]), "colour labels run from 0 to 4; .* has 4 classes"),
])
def test_data_the_hint_cannot_be_fitted_to_is_refused(conditions, colours, message):
    dataset = LatentDataset(torch.zeros(4, 32), conditions, {}, colours)
    with pytest.raises(ValueError, match=message):
        hinted_dataset(ColourHint(16, 4), dataset, 4, ColourHintFitConfig(), progress=False)


def test_fit_settings_without_a_hint_or_with_unknown_keys_are_refused():
    dataset = LatentDataset(torch.zeros(4, 32), torch.zeros(4, 16, 3), {}, torch.zeros(4, dtype=torch.long))
    plain = model_from_config(dict(HINT_PRIOR, colour_hint=None, inner=dict(HINT_PRIOR["inner"], grid_tokens=3)))
    assert colour_hint_data(plain, dataset, {}) == (dataset, None)
    with pytest.raises(ValueError, match="the model config has no colour_hint"):
        colour_hint_data(plain, dataset, {"colour_hint_fit": {"steps": 5}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['step'\] in the colour_hint_fit config"):
        colour_hint_data(model_from_config(HINT_PRIOR), dataset, {"colour_hint_fit": {"step": 5}})
    with pytest.raises(ValueError, match="colour_hint_fit needs steps and batch_size of at least 1"):
        ColourHintFitConfig(steps=0)


def hint_training_config(tmp_path, **train):
    grids, labels = colour_grids(n=16)
    LatentDataset(torch.tanh(torch.randn(16, 32, generator=torch.Generator().manual_seed(1))), grids,
                  {"stage": "text"}, labels).save(tmp_path / "grids.safetensors")
    config = {"model": HINT_PRIOR, "diffusion": {"schedule": "exp", "timesteps": 32, "mean_type": "x_start"},
              "data": str(tmp_path / "grids.safetensors"), "batch_size": 4,
              "colour_hint_fit": {"steps": 60, "batch_size": 16, "lr": 3e-2},
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


@pytest.mark.slow
def test_a_hint_prior_trains_on_two_processes_each_fitting_the_same_hint(tmp_path, torchrun):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert main(["train", "text", "--config", str(hint_training_config(one))]) == 0
    torchrun("-m", "shap_e", "train", "text", "--config", str(hint_training_config(two)))
    assert [r["environment"]["world_size"] for r in read_metrics(two / "run") if "environment" in r] == [2]
    a, b = load_file(str(one / "run" / "model.safetensors")), load_file(str(two / "run" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in (k for k in a if k.startswith("colour_hint.")):
        assert torch.equal(a[key], b[key]), key
