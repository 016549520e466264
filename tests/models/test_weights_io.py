"""Weights in memory once: memory-mapped reads, tensors assigned not copied, a transmitter's decoder part."""
import gc

import pytest
import torch
import torch.nn as nn

from shap_e.models.configs import model_from_config
from shap_e.models.weights_io import assign_state, decoder_config, decoder_state
from shap_e.util.tensor_files import read_tensor_file

PRIOR = {  # about 13 M parameters (52 MB): large enough that a second copy shows in the RSS
    "name": "SplitVectorDiffusion", "d_latent": 64 * 64, "latent_ctx": 64,
    "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 512, "layers": 4, "heads": 8,
              "time_token_cond": True, "token_cond": True, "use_pos_emb": True},
}


def test_checkpoints_in_the_new_and_the_legacy_torch_format_both_read(tmp_path):
    state = {"a": torch.randn(3, 4), "b": torch.arange(5)}
    torch.save(state, tmp_path / "new.pt")
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("new.pt", "legacy.pt"):
        read = read_tensor_file(tmp_path / name, "checkpoint", torch.device("cpu"))
        assert read.keys() == state.keys() and all(torch.equal(read[k], state[k]) for k in state)


def test_assign_state_takes_the_tensors_without_a_copy_and_casts_other_dtypes():
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    state["1.bias"] = state["1.bias"].double()
    assign_state(model, state)
    assert model[0].weight.data_ptr() == state["0.weight"].data_ptr()
    assert model[1].bias.dtype == torch.float32 and torch.equal(model[1].bias, state["1.bias"].float())
    assert model[0].weight.requires_grad and isinstance(model[0].weight, nn.Parameter)


def test_load_model_holds_the_weights_once_through_load_and_forward(tmp_path, peak_rss):
    from shap_e.models.download import load_model

    torch.manual_seed(0)
    state = model_from_config(PRIOR).state_dict()
    size_mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    torch.save(state, tmp_path / "prior.pt")
    del state
    gc.collect()
    x, t = torch.randn(1, 64 * 64), torch.tensor([10])
    peak_rss.start()
    model = load_model("text300M", weights_path=tmp_path / "prior.pt", config=PRIOR)
    with torch.no_grad():
        model(x, t)
    grown = peak_rss.grown_mb()
    # One copy of the weights plus the forward's activations (~12 MB); loading into fresh
    # parameters and then copying would need two copies (> 2 x 52 MB).
    assert size_mb * 0.9 < grown < size_mb * 1.45, (grown, size_mb)


def test_decoder_part_of_a_transmitter_gives_the_transmitters_params(golden):
    f = golden("f")
    assert decoder_config(f["config"]["transmitter"]) == {**f["config"]["decoder"], "name": "ChannelsDecoder"}
    decoder = model_from_config(decoder_config(f["config"]["transmitter"]))
    decoder.load_state_dict(decoder_state(f["state_dict"]), strict=True)
    with torch.no_grad():
        params = decoder.bottleneck_to_params(f["inputs"]["latent"])
    for name, expected in f["outputs"]["params"].items():
        torch.testing.assert_close(params[name], expected, atol=1e-6, rtol=0, msg=name)


def test_decoder_state_and_config_refuse_what_is_not_a_transmitters():
    with pytest.raises(ValueError, match="not a Transmitter's"):
        decoder_state({"wrapped.input_proj.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="needs a Transmitter config"):
        decoder_config({"name": "ChannelsDecoder"})
