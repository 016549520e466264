"""The official import paths and call signatures keep working (the package's contract with users)."""
import importlib
import inspect
import pkgutil

import pytest

import shap_e

OFFICIAL = {
    "shap_e.models.download": {"load_model": ["model_name", "device"],
                               "load_config": ["config_name", "progress", "cache_dir"]},
    "shap_e.diffusion.gaussian_diffusion": {"diffusion_from_config": ["config"]},
    "shap_e.diffusion.sample": {"sample_latents": ["batch_size", "model", "diffusion", "model_kwargs"]},
    "shap_e.util.notebooks": {"create_pan_cameras": ["size", "device"],
                              "decode_latent_images": ["xm", "latent", "cameras", "rendering_mode"],
                              "decode_latent_mesh": ["xm", "latent"], "gif_widget": ["images"]},
    "shap_e.util.data_util": {"load_or_create_multimodal_batch": ["device"]},
    "shap_e.models.configs": {"model_from_config": ["config", "device"]},
}


@pytest.mark.parametrize("module_name", sorted(OFFICIAL))
def test_official_functions_exist_with_official_leading_parameters(module_name):
    module = importlib.import_module(module_name)
    for function, leading in OFFICIAL[module_name].items():
        params = list(inspect.signature(getattr(module, function)).parameters)
        assert params[: len(leading)] == leading, f"{module_name}.{function}{params}"


def test_every_module_imports_and_every_name_in_all_exists():
    # The Blender scripts and the PyTorch3D helpers refuse to import (tests/test_official_api.py
    # checks them).
    refused = ("shap_e.rendering.blender", "shap_e.rendering.pytorch3d_util")
    for info in pkgutil.walk_packages(shap_e.__path__, "shap_e.", onerror=lambda name: None):
        if info.name.endswith("__main__") or info.name.startswith(refused):
            continue
        module = importlib.import_module(info.name)
        for public in getattr(module, "__all__", []):
            assert hasattr(module, public), f"{info.name}.{public}"


def test_official_decode_default_rendering_mode_is_stf():
    from shap_e.util.notebooks import decode_latent_images

    assert inspect.signature(decode_latent_images).parameters["rendering_mode"].default == "stf"
