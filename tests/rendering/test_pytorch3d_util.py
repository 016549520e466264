"""The official PyTorch3D helpers module refuses to import, naming the rasteriser that replaces it."""
import importlib.util

import pytest


@pytest.mark.skipif(importlib.util.find_spec("pytorch3d") is not None, reason="PyTorch3D is installed")
def test_import_fails_like_the_official_module_without_pytorch3d():
    with pytest.raises(ModuleNotFoundError, match="shap_e.rendering.rasterize") as caught:
        importlib.import_module("shap_e.rendering.pytorch3d_util")
    assert caught.value.name == "pytorch3d"
