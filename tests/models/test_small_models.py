"""The bundled small models load offline and do their job on their own domain (regression checks
with margins well below the measured scores in model_cards/)."""
import pytest
import torch

from shap_e.data import generate_asset
from shap_e.eval.classify import dominant_color
from shap_e.eval.metrics import to_eval_mesh, volumetric_iou
from shap_e.models.download import load_model
from shap_e.models.registry import MODELS
from shap_e.util.notebooks import decode_latent_mesh


@pytest.fixture(scope="module")
def xm():
    return load_model("transmitter-small")


def test_bundled_models_are_registered_with_their_decoder():
    assert MODELS["transmitter-small"].bundled_weights.is_file()
    for name in ("text-small", "image-small"):
        if name in MODELS:
            assert MODELS[name].decoders == ("transmitter-small",) and MODELS[name].bundled_weights.is_file()


@pytest.mark.slow
def test_transmitter_small_round_trip_keeps_shape_and_colour(xm, tmp_path):
    from shap_e.encoding import encode
    from shap_e.util.asset_loading import load_asset

    asset = generate_asset("sphere", "blue", "regular", seed=3)
    path = tmp_path / "sphere.ply"
    asset.mesh.export(path)
    latent = encode(str(path), xm, generator=torch.Generator().manual_seed(0), seed=0)
    mesh = to_eval_mesh(decode_latent_mesh(xm, latent, grid_size=48))
    assert volumetric_iou(mesh, to_eval_mesh(load_asset(str(path))), 48) > 0.6
    assert dominant_color(mesh)[0] == "blue"
