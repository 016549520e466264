"""The official import paths and every public name of shap_e.diffusion exist."""
import importlib
import inspect

import pytest

MODULES = [
    "shap_e.diffusion", "shap_e.diffusion.gaussian_diffusion", "shap_e.diffusion.karras",
    "shap_e.diffusion.sample",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_name_in_all_is_importable(name):
    module = importlib.import_module(name)
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.{public}"


def test_sample_latents_keeps_the_official_positional_signature():
    from shap_e.diffusion.sample import sample_latents

    params = list(inspect.signature(sample_latents).parameters)
    assert params[:14] == [
        "batch_size", "model", "diffusion", "model_kwargs", "guidance_scale", "clip_denoised",
        "use_fp16", "use_karras", "karras_steps", "sigma_min", "sigma_max", "s_churn", "device",
        "progress",
    ]


def test_all_samplers_share_one_leading_signature():
    from shap_e.diffusion.karras import SAMPLERS

    for fn in SAMPLERS.values():
        params = list(inspect.signature(fn).parameters)
        assert params[:6] == ["denoiser", "x", "sigmas", "generator", "progress", "callback"]
