"""`model_from_config` builds the official NeRF and STF renderers, their fields and volumes by name."""
import pytest
import torch

from shap_e.models.configs import model_from_config
from shap_e.models.nerf.model import MLPNeRFModel, VoidNeRFModel
from shap_e.models.nerf.renderer import OneStepNeRFRenderer, TwoStepNeRFRenderer
from shap_e.models.nn.camera import camera_batch
from shap_e.models.stf.mlp import MLPSDFModel, MLPTextureFieldModel
from shap_e.models.stf.renderer import STFRenderer
from shap_e.models.volume import BoundingBoxVolume, SphericalVolume
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.util.collections import AttrDict

VOLUME = {"name": "BoundingBoxVolume", "bbox_min": [-1.0, -1.0, -1.0], "bbox_max": [1.0, 1.0, 1.0]}
NERF = {"name": "MLPNeRFModel", "d_hidden": 8, "n_density_layers": 2, "n_channel_layers": 1}


def test_two_step_nerf_renderer_is_built_with_its_nested_models_and_renders():
    renderer = model_from_config({
        "name": "TwoStepNeRFRenderer", "n_coarse_samples": 4, "n_fine_samples": 4,
        "void_model": {"name": "VoidNeRFModel", "background": [0, 0, 0]}, "fine_model": NERF,
        "coarse_model": dict(NERF, d_hidden=4), "volume": VOLUME,
        "fine_background_model": NERF, "outer_volume": {"name": "SphericalVolume", "radius": 3.0},
    })
    assert isinstance(renderer, TwoStepNeRFRenderer) and isinstance(renderer.void_model, VoidNeRFModel)
    assert isinstance(renderer.fine_model, MLPNeRFModel) and renderer.coarse_model.density_mlp.d[-1] == 4
    assert isinstance(renderer.volume, BoundingBoxVolume) and isinstance(renderer.outer_volume, SphericalVolume)
    torch.manual_seed(0)
    out = renderer.render_views(AttrDict(cameras=camera_batch(create_pan_cameras(2))))
    assert out.channels.shape == (1, 20, 2, 2, 3)


def test_one_step_nerf_and_stf_renderers_are_built_by_name():
    one_step = model_from_config({"name": "OneStepNeRFRenderer", "n_samples": 4, "foreground_model": NERF,
                                  "void_model": {"name": "VoidNeRFModel", "background": [1, 2, 3]}, "volume": VOLUME})
    assert isinstance(one_step, OneStepNeRFRenderer) and one_step.background_model is None
    stf = model_from_config({
        "name": "STFRenderer", "grid_size": 8, "volume": VOLUME, "output_srgb": False,
        "sdf": {"name": "MLPSDFModel", "d_hidden": 8, "n_hidden_layers": 2, "initial_bias": 0.3},
        "tf": {"name": "MLPTextureFieldModel", "d_hidden": 8, "n_hidden_layers": 2},
    })
    assert isinstance(stf, STFRenderer) and isinstance(stf.sdf, MLPSDFModel) and isinstance(stf.tf, MLPTextureFieldModel)
    assert stf.sdf.mlp[-1].bias.item() == pytest.approx(0.3)


def test_bad_nested_configs_name_what_is_wrong():
    with pytest.raises(ValueError, match="valid keys"):
        model_from_config({"name": "OneStepNeRFRenderer", "n_samples": 4, "samples": 3})
    with pytest.raises(ValueError, match="`volume:` model config"):
        model_from_config({"name": "OneStepNeRFRenderer", "n_samples": 4, "foreground_model": NERF,
                           "void_model": {"name": "VoidNeRFModel", "background": [0, 0, 0]}, "volume": [1, 2]})
