"""`shap_e.encode(path)` encodes an asset file end to end (small transmitter, random weights)."""
import pytest
import torch
import trimesh

import shap_e
from shap_e.models.configs import model_from_config


@pytest.fixture(scope="module")
def small_transmitter(golden):
    e = golden("e")
    model = model_from_config(e["config"]).eval()
    model.load_state_dict(e["state_dict"])
    return model


def test_encode_from_a_file_gives_a_bounded_reproducible_latent(tmp_path, small_transmitter):
    path = tmp_path / "box.ply"
    trimesh.creation.box(extents=(1.0, 0.5, 0.3)).export(path)
    enc = small_transmitter.encoder
    a = shap_e.encode(path, small_transmitter, generator=torch.Generator().manual_seed(0))
    b = shap_e.encode(path, small_transmitter, generator=torch.Generator().manual_seed(0))
    assert a.shape == (enc.latent_ctx * enc.d_latent,)
    assert torch.equal(a, b)
    assert a.abs().max() < 1


def test_encode_names_a_missing_file(small_transmitter):
    with pytest.raises(FileNotFoundError, match="no_such.glb"):
        shap_e.encode("no_such.glb", small_transmitter)
