"""The official import paths and every public name of shap_e.diffusion exist."""
import importlib
import inspect

import pytest

MODULES = [
    "shap_e.diffusion", "shap_e.diffusion.gaussian_diffusion", "shap_e.diffusion.karras",
    "shap_e.diffusion.k_diffusion", "shap_e.diffusion.sample", "shap_e.diffusion.samplers",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_name_in_all_is_importable(name):
    module = importlib.import_module(name)
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.{public}"


def test_sample_latents_has_the_official_keyword_only_signature():
    from shap_e.diffusion.sample import sample_latents

    params = inspect.signature(sample_latents).parameters
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert list(params)[:14] == [
        "batch_size", "model", "diffusion", "model_kwargs", "guidance_scale", "clip_denoised",
        "use_fp16", "use_karras", "karras_steps", "sigma_min", "sigma_max", "s_churn", "device",
        "progress",
    ]


def test_all_samplers_share_one_leading_signature():
    from shap_e.diffusion.karras import SAMPLERS

    for fn in SAMPLERS.values():
        params = list(inspect.signature(fn).parameters)
        assert params[:6] == ["denoiser", "x", "sigmas", "generator", "progress", "callback"]


# Parameter names and defaults of the official methods (read from the official code), in order.
OFFICIAL_METHODS = {
    "p_mean_variance": "model x t clip_denoised=False denoised_fn=None model_kwargs=None",
    "condition_mean": "cond_fn p_mean_var x t model_kwargs=None",
    "condition_score": "cond_fn p_mean_var x t model_kwargs=None",
    "p_sample": "model x t clip_denoised=False denoised_fn=None cond_fn=None model_kwargs=None",
    "p_sample_loop": "model shape noise=None clip_denoised=False denoised_fn=None cond_fn=None model_kwargs=None "
                     "device=None progress=False temp=1.0",
    "ddim_sample": "model x t clip_denoised=False denoised_fn=None cond_fn=None model_kwargs=None eta=0.0",
    "ddim_reverse_sample": "model x t clip_denoised=False denoised_fn=None cond_fn=None model_kwargs=None eta=0.0",
    "ddim_sample_loop": "model shape noise=None clip_denoised=False denoised_fn=None cond_fn=None "
                        "model_kwargs=None device=None progress=False eta=0.0 temp=1.0",
    "training_losses": "model x_start t model_kwargs=None noise=None",
    "calc_bpd_loop": "model x_start clip_denoised=False model_kwargs=None",
    "q_sample": "x_start t noise=None",
    "get_sigmas": "t",
    "unscale_out_dict": "out",
}
OFFICIAL_METHODS["p_sample_loop_progressive"] = OFFICIAL_METHODS["p_sample_loop"]
OFFICIAL_METHODS["ddim_sample_loop_progressive"] = OFFICIAL_METHODS["ddim_sample_loop"]


@pytest.mark.parametrize("method", sorted(OFFICIAL_METHODS))
def test_gaussian_diffusion_methods_take_the_official_parameters_first(method):
    from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion

    params = list(inspect.signature(getattr(GaussianDiffusion, method)).parameters.values())[1:]
    ours = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}" for p in params]
    official = OFFICIAL_METHODS[method].split()
    assert ours[: len(official)] == official
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in params[len(official):])
