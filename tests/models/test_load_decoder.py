"""`load_decoder`: a transmitter loaded to decode only is its decoder part, and decodes the same."""
import pytest
import torch

from shap_e.models import registry
from shap_e.models.decode import decode_latent_mesh, load_decoder
from shap_e.models.download import load_model
from shap_e.models.transmitter.base import ChannelsDecoder, Transmitter
from shap_e.models.weights_io import decoder_state


@pytest.fixture
def tiny_decoders(golden, registry_entry, tmp_path, monkeypatch):
    f = golden("f")
    entries = {"tiny-transmitter": registry_entry(tmp_path, "tiny-transmitter", f["config"]["transmitter"],
                                                  f["state_dict"]),
               "tiny-decoder": registry_entry(tmp_path, "tiny-decoder", f["config"]["decoder"],
                                              decoder_state(f["state_dict"]))}
    for name, entry in entries.items():
        monkeypatch.setitem(registry.MODELS, name, registry.ModelSpec(name=name, **entry))
    return f, tmp_path / "cache"


def test_a_transmitter_loads_as_its_decoder_part_and_decodes_the_same_mesh(tiny_decoders):
    f, cache = tiny_decoders
    decoder = load_decoder("tiny-transmitter", cache_dir=cache, progress=False)
    whole = load_model("tiny-transmitter", cache_dir=cache, progress=False)
    assert isinstance(decoder, ChannelsDecoder) and isinstance(whole, Transmitter) and not decoder.training
    assert not any(name.startswith("encoder.") for name in decoder.state_dict())
    latent = f["inputs"]["latent"][0]
    a, b = decode_latent_mesh(decoder, latent, grid_size=24), decode_latent_mesh(whole, latent, grid_size=24)
    assert a.faces.shape[0] > 0 and torch.equal(a.faces, b.faces) and torch.equal(a.verts, b.verts)


def test_a_registered_channels_decoder_loads_as_it_is(tiny_decoders):
    _, cache = tiny_decoders
    decoder = load_decoder("tiny-decoder", cache_dir=cache, progress=False)
    assert isinstance(decoder, ChannelsDecoder)
    reference = load_model("tiny-decoder", cache_dir=cache, progress=False)
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in decoder.state_dict().items())
