"""Fixtures shared by the sampling tests: golden file d and its tiny text model."""
import pytest


@pytest.fixture(scope="module")
def d(golden):
    return golden("d")


@pytest.fixture(scope="module")
def model(d):
    """Golden d's text-conditioned prior with its weights, in eval mode."""
    from shap_e.models.configs import model_from_config

    text_model = model_from_config(d["config"]["text_model"])
    text_model.load_state_dict(d["state_dict"]["text_model"])
    return text_model.eval()
