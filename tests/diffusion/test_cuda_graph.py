"""`sample_latents(cuda_graph=True)` without CUDA: the model runs eagerly, with a warning, and the
latents are the eager ones (the CUDA path is checked in tests/test_cuda_parity.py)."""
import pytest
import torch

from shap_e.diffusion.cuda_graph import captured_model
from shap_e.diffusion.sample import sample_latents


def test_captured_model_on_the_cpu_is_the_model_itself_with_a_warning():
    def model_fn(x, t):
        return x * 2

    with pytest.warns(RuntimeWarning, match="cuda_graph=True needs a CUDA device; on cpu the model runs eagerly"):
        assert captured_model(model_fn, torch.device("cpu")) is model_fn


def test_cuda_graph_sampling_on_the_cpu_equals_the_eager_sample(d, model):
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config

    diffusion = diffusion_from_config(d["config"]["diffusion"])
    kwargs = {"embeddings": d["inputs"]["text_embeddings"]}

    def sample(**options):
        return sample_latents(batch_size=2, model=model, diffusion=diffusion, model_kwargs=kwargs,
                              guidance_scale=3.0, karras_steps=8, generator=torch.Generator().manual_seed(0), **options)

    with pytest.warns(RuntimeWarning, match="cuda_graph=True needs a CUDA device") as caught:
        graphed = sample(cuda_graph=True)
    assert caught[0].filename == __file__  # the warning names the caller's line
    assert torch.equal(graphed, sample())
