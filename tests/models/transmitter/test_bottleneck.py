"""shap_e/models/transmitter/bottleneck.py: latent bottlenecks and warps."""
import math

import pytest
import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.models.transmitter.bottleneck import (
    ClampDiffusionNoiseBottleneck,
    ClampNoiseBottleneck,
    IdentityLatentBottleneck,
    IdentityLatentWarp,
    Tan2LatentWarp,
    latent_bottleneck_from_config,
    latent_warp_from_config,
)

DIFFUSION = {"schedule": "inv_parabola", "schedule_args": {"power": 5.0}, "timesteps": 1024}


def test_tan2_warp_fixes_the_ends_spreads_the_middle_and_inverts():
    warp = Tan2LatentWarp(coeff1=1.0)
    x = torch.linspace(-1, 1, 101)
    warped = warp.warp(x)
    torch.testing.assert_close(warped[[0, 50, 100]], torch.tensor([-1.0, 0.0, 1.0]))
    slope = (warp.warp(torch.tensor([1e-3])) / 1e-3).item()
    assert abs(slope - 1.0 / math.tan(math.tan(1.0))) < 1e-3  # tan(tan(x)) / tan(tan(1)) near 0
    torch.testing.assert_close(warp.unwarp(warped), x, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="coeff1=2"):
        Tan2LatentWarp(coeff1=2.0)


def test_identity_bottleneck_and_warp_change_nothing():
    x = torch.randn(3, 5)
    assert torch.equal(IdentityLatentBottleneck(d_latent=5)(x), x)
    assert torch.equal(IdentityLatentWarp().warp(x), x) and torch.equal(IdentityLatentWarp().unwarp(x), x)


def test_clamp_noise_bottleneck_adds_gaussian_noise_of_its_scale_in_training_only():
    bottleneck = ClampNoiseBottleneck(d_latent=4, noise_scale=0.3)
    x = torch.randn(4000, 4)
    assert torch.equal(bottleneck.eval()(x), torch.tanh(x))
    noise = bottleneck.train()(x, generator=torch.Generator().manual_seed(0)) - torch.tanh(x)
    assert abs(noise.std().item() - 0.3) < 0.01 and abs(noise.mean().item()) < 0.01


def test_clamp_diffusion_noise_bottleneck_is_q_sample_at_a_random_timestep_for_a_share_of_rows():
    bottleneck = ClampDiffusionNoiseBottleneck(d_latent=6, diffusion=DIFFUSION, diffusion_prob=0.5).train()
    x = torch.randn(8, 6)
    out = bottleneck(x, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)  # the same draws, in the reference's order
    t = torch.randint(0, 1024, (8,), generator=g)
    t = torch.where(torch.rand(8, generator=g) < 0.5, t, torch.zeros_like(t))
    noise = torch.randn(8, 6, generator=g)
    expected = diffusion_from_config(DIFFUSION).q_sample(torch.tanh(x), t, noise=noise)
    torch.testing.assert_close(out, expected)
    assert torch.equal(bottleneck.eval()(x), torch.tanh(x))
    assert ClampDiffusionNoiseBottleneck(d_latent=6, diffusion=DIFFUSION).diffusion_prob == 1.0  # official default


def test_bottlenecks_and_warps_from_config_by_name_without_changing_the_config():
    config = {"name": "clamp_diffusion_noise", "diffusion": DIFFUSION, "diffusion_prob": 0.1}
    bottleneck = latent_bottleneck_from_config(config, device=None, d_latent=4)
    assert isinstance(bottleneck, ClampDiffusionNoiseBottleneck) and bottleneck.diffusion_prob == 0.1
    assert config["name"] == "clamp_diffusion_noise"
    assert isinstance(latent_bottleneck_from_config({"name": "identity"}, None, 4), IdentityLatentBottleneck)
    assert latent_warp_from_config({"name": "tan2", "coeff1": 0.5}, None).coeff1 == 0.5
    with pytest.raises(ValueError, match=r"unknown latent_bottleneck name 'tanh'; valid names: \['clamp_diffusion"):
        latent_bottleneck_from_config({"name": "tanh"}, None, 4)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['scale'\]"):
        latent_bottleneck_from_config({"name": "clamp_noise", "scale": 1.0}, None, 4)
    with pytest.raises(ValueError, match="unknown latent_warp name"):
        latent_warp_from_config({"name": "tan3"}, None)
