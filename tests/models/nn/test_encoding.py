"""Positional encodings: the NeRF encoding equals the reference bit for bit (golden g, `misc`); the
"v1" encoding, spherical harmonics and the encoding layers compute what their formulas say."""
import math

import numpy as np
import pytest
import torch

from shap_e.models.generation.util import timestep_embedding
from shap_e.models.nn.encoding import (
    MultiviewPointCloudEmbedding,
    MultiviewPoseEmbedding,
    PosEmbLinear,
    channel_encoding_channels,
    encode_channels,
    encode_direction,
    encode_position,
    maybe_encode_direction,
    posenc_nerf,
    position_encoding_channels,
    spherical_harmonics_basis,
)


def test_nerf_posenc_matches_golden_exactly(golden):
    misc = golden("g")["outputs"]["misc"]
    x = misc["posenc_input"]
    assert torch.equal(encode_position("nerf", position=x), misc["posenc_nerf_deg15"])
    assert torch.equal(encode_channels("nerf", channels=x), misc["posenc_nerf_deg15"])
    assert torch.equal(maybe_encode_direction("nerf", position=x, direction=x), misc["posenc_nerf_dir_deg8"])
    assert torch.equal(maybe_encode_direction("nerf", position=x), misc["posenc_nerf_dir_none"])
    assert torch.equal(encode_direction(x, x), misc["posenc_nerf_dir_deg8"])


def test_nerf_posenc_uses_shifted_sine_not_cosine():
    x = torch.tensor([[0.3, -0.7, 0.1]])
    enc = posenc_nerf(x, 0, 15)
    xb = (x[..., None, :] * 2.0 ** torch.arange(15.0)[:, None]).reshape(1, -1)
    assert torch.equal(enc[:, 48:], torch.sin(xb + math.pi / 2))


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


def test_v1_encoding_is_cos_then_sin_of_ten_octaves_per_channel():
    x = torch.tensor([[0.25, -1.5]], dtype=torch.float64)
    enc = encode_position("v1", position=x)
    assert enc.shape == (1, 40)
    angles = x[0, 1] * 2.0 ** torch.arange(10, dtype=torch.float64)
    torch.testing.assert_close(enc[0, 20:30], angles.cos())
    torch.testing.assert_close(enc[0, 30:40], angles.sin())
    assert torch.equal(encode_channels("v1", channels=x), enc)


def test_encoding_widths_per_channel():
    assert position_encoding_channels() == channel_encoding_channels() == 1
    assert position_encoding_channels("nerf") == channel_encoding_channels("nerf") == 31
    assert position_encoding_channels("v1") == channel_encoding_channels("v1") == 20
    position = torch.zeros(2, 5, 3)
    assert maybe_encode_direction("v1", position=position).shape == (2, 5, 16)
    assert maybe_encode_direction("nerf", position=position).shape == (2, 5, 51)


def test_unknown_encoding_version_is_named():
    with pytest.raises(ValueError, match="'v2'.*nerf"):
        encode_position("v2", position=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="'v2'"):
        maybe_encode_direction("v2", position=torch.zeros(1, 3))


def _unit(n: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    v = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return v / v.norm(dim=-1, keepdim=True)


def test_spherical_harmonics_low_bands_have_the_tiny_cuda_nn_signs():
    d = _unit(50)
    x, y, z = d.unbind(-1)
    sh = spherical_harmonics_basis(d, 3)
    c0, c1 = 1 / (2 * math.sqrt(math.pi)), math.sqrt(3 / (4 * math.pi))
    expected = [
        torch.full_like(x, c0), -c1 * y, c1 * z, -c1 * x,
        1.0925484305920792 * x * y, -1.0925484305920792 * y * z, 0.94617469575755997 * z * z - 0.31539156525251999,
        -1.0925484305920792 * x * z, 0.54627421529603959 * (x * x - y * y),
    ]
    torch.testing.assert_close(sh, torch.stack(expected, dim=-1))
    # Two of the reference's band-7 coefficients (m = 0 and m = 7).
    top = spherical_harmonics_basis(d, 8)
    torch.testing.assert_close(top[:, 56], 0.068284276912004949 * z * (315 * z**2 - 693 * z**4 + 429 * z**6 - 35))
    torch.testing.assert_close(
        top[:, 63], 0.70716273252459627 * x * (-35 * x**2 * y**4 + 21 * x**4 * y**2 - x**6 + 7 * y**6)
    )


@pytest.mark.parametrize("degree", [4, 8])
def test_spherical_harmonics_are_orthonormal_on_the_sphere(degree):
    # Gauss-Legendre in cos(theta) x uniform phi integrates these polynomials exactly.
    nodes, weights = (torch.from_numpy(a) for a in np.polynomial.legendre.leggauss(2 * degree))
    phi = torch.arange(4 * degree, dtype=torch.float64) * 2 * math.pi / (4 * degree)
    cos_t, ph = torch.meshgrid(nodes, phi, indexing="ij")
    sin_t = (1 - cos_t**2).sqrt()
    d = torch.stack([sin_t * ph.cos(), sin_t * ph.sin(), cos_t], dim=-1).reshape(-1, 3)
    w = (weights[:, None] * torch.full_like(phi, 2 * math.pi / (4 * degree))).reshape(-1)
    sh = spherical_harmonics_basis(d, degree)
    gram = (sh * w[:, None]).T @ sh
    torch.testing.assert_close(gram, torch.eye(degree**2, dtype=torch.float64), atol=1e-10, rtol=0)


def test_spherical_harmonics_keep_batch_shape_and_check_arguments():
    assert spherical_harmonics_basis(_unit(6, dtype=torch.float32).view(2, 3, 3), 4).shape == (2, 3, 16)
    with pytest.raises(ValueError, match="sh_degree"):
        spherical_harmonics_basis(_unit(2), 0)
    with pytest.raises(ValueError, match="coords"):
        spherical_harmonics_basis(torch.zeros(2, 2), 2)


def test_pos_emb_linear_applies_the_linear_layer_to_the_encoding():
    torch.manual_seed(0)
    layer = PosEmbLinear("nerf", 3, 8)
    assert layer.in_features == 93
    x = torch.rand(4, 3)
    torch.testing.assert_close(layer(x), posenc_nerf(x) @ layer.weight.T + layer.bias)
    plain = PosEmbLinear(None, 3, 8)
    torch.testing.assert_close(plain(x), x @ plain.weight.T + plain.bias)


def test_multiview_point_cloud_embedding_masks_encoded_pixels_with_the_unknown_token():
    torch.manual_seed(0)
    embed = MultiviewPointCloudEmbedding("nerf", 3, 5)
    assert embed.in_channels == 279 and embed.unk_token.shape == (279,)
    colour, origin, position = (torch.rand(1, 2, 3, 4, 4) for _ in range(3))
    mask = torch.rand(1, 2, 1, 4, 4) > 0.3
    out = embed(colour, origin, position, mask)
    assert out.shape == (1, 2, 5, 4, 4)

    def last(x):
        return x.permute(0, 1, 3, 4, 2)

    features = torch.cat([posenc_nerf(last(colour)), posenc_nerf(last(origin)), posenc_nerf(last(position))], -1)
    features = torch.where(last(mask), features, embed.unk_token).permute(0, 1, 4, 2, 3).reshape(2, 279, 4, 4)
    expected = torch.nn.functional.conv2d(features, embed.weight, embed.bias, padding=1).view(1, 2, 5, 4, 4)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("version, width", [(None, 9), ("nerf", 31 * 3 + 93 + 51), ("v1", 20 * 3 + 60 + 16)])
def test_multiview_pose_embedding_takes_the_direction_encoding_width(version, width):
    embed = MultiviewPoseEmbedding(version, 3, 4, stride=2)
    assert embed.in_channels == width
    out = embed(torch.rand(2, 1, 3, 6, 6), torch.rand(2, 1, 3, 6, 6), _unit(72, dtype=torch.float32).view(2, 1, 3, 6, 6))
    assert out.shape == (2, 1, 4, 3, 3)
