"""Positional encodings equal the reference bit for bit (golden g, `misc`)."""
import torch

from shap_e.models.generation.util import timestep_embedding
from shap_e.models.nn.encoding import encode_direction, encode_position, posenc_nerf


def test_nerf_posenc_matches_golden_exactly(golden):
    misc = golden("g")["outputs"]["misc"]
    x = misc["posenc_input"]
    assert torch.equal(encode_position(x), misc["posenc_nerf_deg15"])
    assert torch.equal(encode_direction(x, x), misc["posenc_nerf_dir_deg8"])
    assert torch.equal(encode_direction(x), misc["posenc_nerf_dir_none"])


def test_nerf_posenc_uses_shifted_sine_not_cosine():
    x = torch.tensor([[0.123456, -0.654321, 0.999]])
    enc = posenc_nerf(x, 0, 15)
    xb = x[0, :, None] * 2.0 ** torch.arange(15)
    assert torch.equal(enc[0, 3 + 45 + 14 * 3], torch.sin(xb[0, 14] + torch.pi / 2))


def test_timestep_embedding_matches_golden(golden):
    misc = golden("g")["outputs"]["misc"]
    t = misc["timestep_input"]
    # Bit for bit on the AMD EPYC CPUs the goldens came from. On Intel CPUs MKL's vectorised exp rounds
    # some frequencies one ulp apart, and at t = 1,023 rad one ulp of the argument is 6e-5.
    torch.testing.assert_close(timestep_embedding(t, 64), misc["timestep_embedding_dim64"], atol=1e-4, rtol=0)
    torch.testing.assert_close(timestep_embedding(t, 7), misc["timestep_embedding_dim7"], atol=1e-4, rtol=0)
    fractional = torch.tensor([0.5, 865.1671])
    torch.testing.assert_close(
        timestep_embedding(fractional, 64), misc["timestep_embedding_float_t_dim64"], atol=1e-4, rtol=0
    )
