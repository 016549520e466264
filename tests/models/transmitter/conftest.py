"""The golden transmitter (file e's config and weights), shared by the transmitter tests."""
import pytest

from shap_e.models.configs import model_from_config


@pytest.fixture(scope="module")
def transmitter(golden):
    """Golden e's small `Transmitter` with its weights, in eval mode."""
    e = golden("e")
    model = model_from_config(e["config"]).eval()
    model.load_state_dict(e["state_dict"], strict=True)
    return model
