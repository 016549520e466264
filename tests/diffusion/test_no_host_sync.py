"""The sampling loops never read a tensor back to the host (the GPU-readiness item of issue #8).

A CPU-only machine cannot observe device syncs, so the test records the operations that would
be one on an accelerator: scalar reads (`.item()`, `float(t)`, `if t`), `torch.equal`, data-
dependent shapes (`nonzero`, boolean masks), `.cpu()`, `.numpy()`, `.tolist()` and tensors built
from host data (`torch.tensor`, `torch.from_numpy`: a host -> device copy each step). The detector
arms at the second model call, after one step has filled the per-device caches, and stays armed
until `sample_latents` returns, so every later step, the final step and the model forward count.
The one deliberate read, after the loop, is `check_sampled`'s refusal of non-finite latents (one
per call, not per step): the detector is disarmed for it.
"""
from typing import List

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.karras import sigma_to_t, sigma_to_timestep, timestep_thresholds
from shap_e.diffusion.sample import sample_latents

aten = torch.ops.aten
SCALAR_READS = {aten.item.default, aten.is_nonzero.default, aten._local_scalar_dense.default,
                aten.equal.default, aten.nonzero.default, aten.masked_select.default,
                aten.unique_consecutive.default, aten._unique2.default}
HOST_METHODS = [(torch.Tensor, "cpu"), (torch.Tensor, "numpy"), (torch.Tensor, "tolist"),
                (torch, "tensor"), (torch, "from_numpy"), (torch, "as_tensor")]


class SyncDetector(TorchDispatchMode):
    """Records host syncs while `armed`; dispatch-level ops and patched host-facing methods."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.armed = False
        self.found: List[str] = []
        for owner, name in HOST_METHODS:
            monkeypatch.setattr(owner, name, self._guard(getattr(owner, name), name))

    def _guard(self, method, name):
        def guarded(*args, **kwargs):
            if self.armed:
                self.found.append(name)
            return method(*args, **kwargs)

        return guarded

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        masked = func is aten.index.Tensor and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]
        )
        if self.armed and (func in SCALAR_READS or masked):
            self.found.append(str(func))
        return func(*args, **(kwargs or {}))


class ArmingModel(torch.nn.Module):
    """Runs the real model; arms the detector from the second call on."""

    conditioning = "text"

    def __init__(self, model, detector):
        super().__init__()
        self.model, self.detector, self.calls = model, detector, 0
        self.d_latent = model.d_latent

    def forward(self, x, t, **kwargs):
        self.calls += 1
        self.detector.armed = self.detector.armed or self.calls >= 2
        return self.model(x, t, **kwargs)


def _run_detected(monkeypatch, model, diffusion, emb, **kwargs):
    import shap_e.diffusion.sample as sample

    detector = SyncDetector(monkeypatch)
    wrapped = ArmingModel(model, detector)
    check_sampled = sample.check_sampled

    def disarmed_check(latents, guidance_scale):
        detector.armed = False
        return check_sampled(latents, guidance_scale)

    monkeypatch.setattr(sample, "check_sampled", disarmed_check)
    with detector:
        out = sample_latents(
            batch_size=len(emb), model=wrapped, diffusion=diffusion, model_kwargs=dict(embeddings=emb),
            guidance_scale=3.0, clip_denoised=True, use_fp16=False, **kwargs,
        )
    detector.armed = False
    monkeypatch.undo()
    assert wrapped.calls >= 3
    return out, detector.found


def test_detector_catches_every_kind_of_host_sync(monkeypatch):
    t = torch.ones(3)
    probes = [lambda: t.sum().item(), lambda: bool(t[0]), lambda: float(t[0]), lambda: t.tolist(),
              lambda: t.cpu(), lambda: t.numpy(), lambda: t[t > 0], lambda: torch.tensor([1.0]),
              lambda: 1 if t[0] > 0 else 0, lambda: torch.equal(t, t)]
    for probe in probes:
        detector = SyncDetector(monkeypatch)
        detector.armed = True
        with detector:
            probe()
        monkeypatch.undo()
        assert detector.found, probe


@pytest.mark.parametrize("sampler, churn", [("heun", 0.0), ("heun", 3.0), ("euler", 3.0),
                                            ("euler_ancestral", 0.0), ("dpmpp_2m", 0.0)])
def test_karras_samplers_make_no_host_sync_inside_the_loop(monkeypatch, model, d, sampler, churn):
    diffusion = diffusion_from_config(d["config"]["diffusion"])
    emb = d["inputs"]["text_embeddings"]
    out, found = _run_detected(monkeypatch, model, diffusion, emb, karras_steps=4, s_churn=churn,
                               sampler=sampler, generator=torch.Generator().manual_seed(0))
    assert found == [] and torch.isfinite(out).all()


def test_ddpm_loop_on_a_respaced_diffusion_makes_no_host_sync(monkeypatch, model, d):
    diffusion = diffusion_from_config({**d["config"]["ddpm_diffusion"], "respacing": "6"})
    emb = d["inputs"]["text_embeddings"]
    out, found = _run_detected(monkeypatch, model, diffusion, emb, use_karras=False,
                               generator=torch.Generator().manual_seed(0))
    assert found == [] and out.shape == (2, 128)


def test_bfloat16_autocast_path_makes_no_host_sync(monkeypatch, model, d):
    diffusion = diffusion_from_config(d["config"]["diffusion"])
    emb = d["inputs"]["text_embeddings"]
    out, found = _run_detected(monkeypatch, model, diffusion, emb, karras_steps=3,
                               dtype=torch.bfloat16)
    assert found == [] and out.dtype == torch.float32


def _sigmas_around_schedule(alphas_cumprod: np.ndarray, count: int) -> np.ndarray:
    """Log-uniform float32 σ plus, for every t, the σ whose ᾱ is closest to ᾱ_t and its float32
    neighbours (where a host/device rounding difference would show)."""
    rng = np.random.default_rng(0)
    spread = np.exp(rng.uniform(np.log(1e-5), np.log(1e4), count)).astype(np.float32)
    exact = np.sqrt(1.0 / alphas_cumprod - 1.0).astype(np.float32)
    up, down = np.nextafter(exact, np.float32(np.inf)), np.nextafter(exact, np.float32(0))
    return np.concatenate([spread, exact, up, down])


@pytest.mark.parametrize("config", [dict(schedule="cosine", timesteps=1024),
                                    dict(schedule="linear", timesteps=1000),
                                    dict(schedule="exp", timesteps=1024)])
def test_device_timestep_map_equals_the_truncated_host_interpolation(config):
    alphas = diffusion_from_config(config).alphas_cumprod
    sigmas = _sigmas_around_schedule(alphas, 5000)
    host = np.array([int(sigma_to_t(s, alphas)) for s in sigmas])
    device = sigma_to_timestep(torch.from_numpy(sigmas), timestep_thresholds(alphas)).numpy()
    assert np.array_equal(device, host)
    assert host.min() == 0 and host.max() >= len(alphas) - 2


def test_image_grid_prior_forward_makes_no_host_sync(monkeypatch, d):
    from shap_e.models.configs import model_from_config

    grid_model = model_from_config(d["config"]["grid_model"])
    grid_model.load_state_dict(d["state_dict"]["grid_model"])
    diffusion = diffusion_from_config(d["config"]["diffusion"])
    out, found = _run_detected(monkeypatch, grid_model.eval(), diffusion, d["inputs"]["grid_embeddings"],
                               karras_steps=3, sampler="dpmpp_2m")
    assert found == [] and torch.isfinite(out).all()
