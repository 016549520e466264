"""`sample_latents`: draw Shap-E latents from a conditional diffusion prior (docs/behaviour.md#sample-latents); the
official module path, with the official keyword-only signature plus this package's options."""
import inspect
import warnings
from typing import Any, Callable, Dict, Optional, Union

import torch

from shap_e.diffusion.checks import (
    check_diffusion_matches,
    check_sample_memory,
    check_sampled,
    check_sampling_numbers,
    check_texts,
)
from shap_e.diffusion.cuda_graph import captured_model
from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion
from shap_e.diffusion.karras import SAMPLERS, KarrasDenoiser, guided_denoiser, karras_sigmas
from shap_e.diffusion.noise import GeneratorArg, check_generator, model_device, randn
from shap_e.diffusion.presets import SamplingPreset, check_guidance_max_sigma, resolve_preset
from shap_e.util.config import resolve_device
from shap_e.util.errors import InvalidArgumentError
from shap_e.util.precision import native_bf16

__all__ = ["check_strength", "regression_start", "sample_latents", "uncond_guide_model"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def sample_latents(
    *,
    batch_size: int,
    model: torch.nn.Module,
    diffusion: GaussianDiffusion,
    model_kwargs: Optional[Dict[str, Any]],
    guidance_scale: float,
    clip_denoised: bool = True,
    use_fp16: bool = False,
    use_karras: Optional[bool] = None,
    karras_steps: Optional[int] = None,
    sigma_min: Optional[float] = None,
    sigma_max: Optional[float] = None,
    s_churn: Optional[float] = None,
    device: Optional[torch.device] = None,
    progress: bool = False,
    preset: Optional[Union[str, SamplingPreset]] = None,
    sampler: Optional[str] = None,
    generator: GeneratorArg = None,
    init_latent: Optional[torch.Tensor] = None,
    strength: Optional[float] = None,
    dtype: Optional[torch.dtype] = None,
    legacy_guidance: bool = False,
    guidance_max_sigma: Optional[float] = None,
    callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    cuda_graph: bool = False,
) -> torch.Tensor:
    """Sample `[batch_size, model.d_latent]` float32 latents.

    Every argument is keyword-only, as in the official API, whose arguments all keep their
    meaning. Guidance runs when `guidance_scale` is not 0 or 1 (0 behaves like 1, as in the
    reference). Extras:

    * `preset`: a `shap_e.diffusion.presets.SamplingPreset`, or the name of one in `PRESETS`
      ("default": 64 Heun steps as the official notebooks, "fast": DPM-Solver++(2M) with
      `FAST_STEPS` steps). Precedence: each of `use_karras, karras_steps, sigma_min, sigma_max,
      s_churn, sampler` the caller passes (not None) wins over the preset; the preset fills the
      rest; without a preset, "default" does. So the official call (which passes them all) is
      unchanged, and a preset takes effect fully only when those arguments are left out.
    * `sampler`: a key of `shap_e.diffusion.samplers.SAMPLERS`: `heun` (reference), `dpm2`,
      `euler`, `euler_ancestral` or `dpmpp_2m` (Karras path).
    * `generator`: `None` (global RNG, reference draw order), a `torch.Generator`, or one
      generator per sample (sample i then matches the same seed sampled alone).
    * `init_latent` `[batch, d_latent]` + `strength` in (0, 1]: SDEdit; start at sigma index
      `int((1 - strength) * karras_steps)` from `init_latent + sigma * noise`.
    * `dtype`: autocast dtype of the model (float32, bfloat16, float16); `use_fp16=True` means
      float16, or bfloat16 on CPU. The sampler arithmetic always stays float32.
    * `legacy_guidance`: non-Karras path only; the official guidance there (`uncond_guide_model`:
      guidance on the first 3 output entries, a `2 * batch_size`-row result). Without it that path
      guides every entry and returns `batch_size` rows.
    * `guidance_max_sigma`: Karras path only; guide only the steps at σ ≤ this value, and use the
      conditional prediction alone above it (None: guide every step). `text-small`'s registry
      entry recommends 5 (`ModelSpec.guidance_max_sigma`; docs/findings/text-small.md).
    * `callback`: Karras path only; called once per sampler step, after that step's model
      evaluation, with the sampler's dict (`x, i, sigma, sigma_hat, denoised`) and `steps`, the
      number of steps this call runs. An exception it raises stops sampling between two steps
      (the web app's cancel button does this).
    * `cuda_graph`: on CUDA, replay the model call from CUDA graphs (`torch.compile`,
      `mode="reduce-overhead"`; `shap_e.diffusion.cuda_graph`); elsewhere it runs eagerly, with a warning.
    """
    settings = resolve_preset(preset, sampler=sampler, use_karras=use_karras,
                              karras_steps=karras_steps, sigma_min=sigma_min, sigma_max=sigma_max,
                              s_churn=s_churn)
    sampler, use_karras, karras_steps = settings.sampler, settings.use_karras, settings.karras_steps
    sigma_min, sigma_max, s_churn = settings.sigma_min, settings.sigma_max, settings.s_churn
    model_kwargs = dict(model_kwargs or {})
    check_sampling_numbers(guidance_scale, karras_steps, sigma_min, sigma_max, s_churn, use_karras, strength)
    check_texts(model_kwargs)
    check_diffusion_matches(model, diffusion)
    guided = guidance_scale not in (0.0, 1.0)
    _validate(batch_size, model, model_kwargs, guided, use_karras, karras_steps, s_churn, sampler,
              generator, init_latent, strength, legacy_guidance)
    check_guidance_max_sigma(guidance_max_sigma)
    if guidance_max_sigma is not None and not use_karras:
        raise ValueError("guidance_max_sigma needs use_karras=True: the DDPM path has no sigma schedule")
    if callback is not None and not use_karras:
        raise ValueError("callback needs use_karras=True: the DDPM path reports no steps")
    if device is None:
        device = model_device(model)
    device = resolve_device(device)
    check_sample_memory(batch_size, model.d_latent, device)
    compute_dtype = _resolve_dtype(dtype, use_fp16, device)
    with torch.inference_mode():
        if hasattr(model, "cached_model_kwargs"):
            model_kwargs = model.cached_model_kwargs(batch_size, model_kwargs)
        if guided:
            # Conditional rows first, then the unconditional (all-zero) rows.
            model_kwargs = {k: torch.cat([v, torch.zeros_like(v)]) for k, v in model_kwargs.items()}
        model_fn = _autocast(model, device, compute_dtype)
        if cuda_graph:
            model_fn = captured_model(model_fn, device)
        shape = (batch_size, model.d_latent)
        if not use_karras:
            return check_sampled(_ddpm(model_fn, diffusion, shape, model_kwargs, guidance_scale if guided else None,
                                       clip_denoised, device, progress, generator, legacy_guidance), guidance_scale)
        sigmas = karras_sigmas(karras_steps, sigma_min, sigma_max, device=device)
        if init_latent is None:
            x = randn(shape, generator, device=device) * sigma_max
        else:
            sigmas = sigmas[int((1 - strength) * karras_steps):]
            init = diffusion.scale_channels(init_latent.to(device=device, dtype=torch.float32)).expand(*shape)
            x = init + randn(shape, generator, device=device) * sigmas[0]
        denoiser = KarrasDenoiser(model_fn, diffusion, clip_denoised, model_kwargs)
        if guided:
            denoiser = guided_denoiser(denoiser, guidance_scale, guidance_max_sigma)
        options = {"s_churn": s_churn} if s_churn else {}
        if callback is not None:
            options["callback"] = _with_step_count(callback, len(sigmas) - 1)
        x = SAMPLERS[sampler](denoiser, x, sigmas, generator=generator, progress=progress, **options)
        return check_sampled(diffusion.unscale_channels(x), guidance_scale)


def _with_step_count(callback: Callable[[Dict[str, Any]], None], steps: int) -> Callable[[Dict[str, Any]], None]:
    """`callback` with `steps` (the steps of this call) added to every step's dict."""

    def report(info: Dict[str, Any]) -> None:
        callback({**info, "steps": steps})

    return report


def check_strength(strength: float, name: str = "strength") -> None:
    """Raise an InvalidArgumentError naming `name` unless the SDEdit `strength` is a number in (0, 1]."""
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not 0 < strength <= 1:
        raise InvalidArgumentError(f"{name} must be in (0, 1], got {strength!r}")


def regression_start(
    model: torch.nn.Module, batch_size: int, model_kwargs: Dict[str, Any], strength: float
) -> Dict[str, Any]:
    """`sample_latents` keyword arguments that start from the prior's own regressed latent.

    `model.regress_latent` (an image prior with a latent head) reads a `[batch_size, d_latent]` guess
    off the pictures in `model_kwargs`; sampling then starts there at SDEdit `strength`. At strength
    1 this is `{}`: sampling from noise, and any prior works.
    """
    check_strength(strength)
    if strength == 1:
        return {}
    return {"init_latent": model.regress_latent(batch_size, model_kwargs), "strength": strength}


def _validate(batch_size, model, model_kwargs, guided, use_karras, karras_steps, s_churn, sampler,
              generator, init_latent, strength, legacy_guidance) -> None:
    """Every argument check, before any model evaluation."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler={sampler!r} is unknown; use one of {sorted(SAMPLERS)}")
    if not hasattr(model, "d_latent"):
        raise ValueError("model has no d_latent attribute; pass a latent diffusion model")
    if use_karras and karras_steps < 2:
        raise ValueError(f"karras_steps must be >= 2, got {karras_steps}")
    if guided and not (hasattr(model, "conditioning") or hasattr(model, "cached_model_kwargs")):
        raise ValueError("guidance_scale != 1 needs a conditional model; use guidance_scale=1.0")
    if guided and not model_kwargs:
        raise ValueError("guidance_scale != 1 needs model_kwargs (texts=, images= or embeddings=)")
    for key, value in model_kwargs.items():
        if value is not None and len(value) != batch_size:
            raise ValueError(
                f"model_kwargs[{key!r}] has {len(value)} entries but batch_size is {batch_size}"
            )
    if s_churn and "s_churn" not in inspect.signature(SAMPLERS[sampler]).parameters:
        raise ValueError(f"sampler {sampler!r} does not churn; use s_churn=0 or sampler='heun'")
    if legacy_guidance and use_karras:
        raise ValueError("legacy_guidance only applies to use_karras=False")
    _validate_init(init_latent, strength, use_karras, batch_size, model.d_latent)
    rows = 2 * batch_size if (legacy_guidance and guided and not use_karras) else batch_size
    check_generator(generator, rows)


def _validate_init(init_latent, strength, use_karras, batch_size, d_latent) -> None:
    if init_latent is None:
        if strength is not None:
            raise ValueError("strength is only used with init_latent; pass both or neither")
        return
    if not use_karras:
        raise ValueError("init_latent (SDEdit) needs use_karras=True")
    if strength is None or not 0.0 < strength <= 1.0:
        raise ValueError(f"strength must be in (0, 1] with init_latent, got {strength!r}")
    if init_latent.shape[-1] != d_latent or init_latent.ndim > 2 or (
        init_latent.ndim == 2 and init_latent.shape[0] not in (1, batch_size)
    ):
        raise ValueError(
            f"init_latent must be [{batch_size}, {d_latent}] (or [1, {d_latent}] / [{d_latent}]), "
            f"got {list(init_latent.shape)}"
        )


def _resolve_dtype(dtype: Optional[torch.dtype], use_fp16: bool, device: torch.device) -> torch.dtype:
    if dtype is not None:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype={dtype} is unsupported; use one of {list(_DTYPES)}")
        return dtype
    if not use_fp16:
        return torch.float32
    if device.type == "cpu":
        # float16 matmuls are slow on CPUs; bfloat16 is fast only where the CPU multiplies it natively
        # (AVX512-BF16, AMX), and emulated elsewhere, slower than float32.
        if native_bf16(device):
            warnings.warn("use_fp16=True on CPU: running the model in bfloat16 instead", stacklevel=3)
            return torch.bfloat16
        warnings.warn("use_fp16=True on CPU: this CPU has no native bfloat16 or float16 matrix units, so the "
                      "model runs in float32 (faster here, and exact)", stacklevel=3)
        return torch.float32
    return torch.float16


def _autocast(model: Callable[..., torch.Tensor], device: torch.device, dtype: torch.dtype):
    """The model under autocast, its output cast back to float32 for the sampler arithmetic."""
    if dtype == torch.float32:
        return model

    def run(x: torch.Tensor, t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        with torch.autocast(device.type, dtype=dtype):
            out = model(x, t, **kwargs)
        return out.float()

    return run


def _ddpm(model_fn, diffusion, shape, model_kwargs, guidance_scale, clip_denoised, device, progress,
          generator, legacy_guidance) -> torch.Tensor:
    """Ancestral DDPM sampling over every timestep of `diffusion` (non-Karras path)."""
    if guidance_scale is not None:
        if legacy_guidance:
            model_fn = uncond_guide_model(model_fn, guidance_scale)
            shape = (2 * shape[0], shape[1])
        else:
            model_fn = _guided_model(model_fn, guidance_scale)
    return diffusion.p_sample_loop(model_fn, shape, clip_denoised=clip_denoised,
                                   model_kwargs=model_kwargs, device=device, progress=progress,
                                   generator=generator)


def _guided_model(model_fn, scale: float):
    """CFG on the whole mean part (all d channels); the variance part comes from the cond rows."""

    def run(x: torch.Tensor, t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        out = model_fn(torch.cat([x, x]), torch.cat([t, t]), **kwargs)
        cond, uncond = torch.split(out, len(x), dim=0)
        d = x.shape[1]
        mean = uncond[:, :d] + scale * (cond[:, :d] - uncond[:, :d])
        return torch.cat([mean, cond[:, d:]], dim=1)

    return run


def uncond_guide_model(model: Callable[..., torch.Tensor], scale: float) -> Callable[..., torch.Tensor]:
    """The official DDPM-path guidance (a Point-E leftover): the wrapped model takes x with 2B rows,
    evaluates the first B twice (with the [cond | uncond] kwargs rows) and guides only output
    entries 0..2; both halves keep their own remaining entries."""

    def run(x: torch.Tensor, t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        half = x[: len(x) // 2]
        out = model(torch.cat([half, half]), t, **kwargs)
        head, rest = out[:, :3], out[:, 3:]
        cond, uncond = torch.chunk(head, 2, dim=0)
        guided = uncond + scale * (cond - uncond)
        return torch.cat([torch.cat([guided, guided]), rest], dim=1)

    return run
