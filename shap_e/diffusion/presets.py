"""Named sampling presets: the sampler and its σ grid in one word (`preset="fast"`).

`default` is the official notebooks' setting (64 Heun steps, 127 model evaluations). `fast` is
DPM-Solver++(2M) with `FAST_STEPS` steps, one evaluation per step; `FAST_STEPS` is the fewest
steps whose latents stay within the calibration threshold of the 64-step Heun latents (see
`bench/preset_calibration.py`). Guidance, batch size and dtype are not part of a preset.
"""
from dataclasses import dataclass, replace
from typing import Dict, Optional, Union

__all__ = ["FAST_STEPS", "PRESETS", "SamplingPreset", "check_guidance_max_sigma", "get_preset", "resolve_preset"]

# Calibrated on text-small (bench/README.md): 20 steps stay within a relative RMS of 0.018 of the
# 64-step Heun latents (threshold 0.05); 16 steps reach 0.032, but 0.050-0.052 on earlier weights.
FAST_STEPS = 20


@dataclass(frozen=True)
class SamplingPreset:
    """Karras-path sampler settings (docs/behaviour.md#karras-sampler); `sampler` is a key of
    `samplers.SAMPLERS`."""

    name: str
    sampler: str
    karras_steps: int
    sigma_min: float = 1e-3
    sigma_max: float = 160.0
    s_churn: float = 0.0
    use_karras: bool = True

    @property
    def model_evaluations(self) -> int:
        """Model calls per sample (each on 2 rows per sample when guided)."""
        per_step = {"heun": 2 * self.karras_steps - 1, "dpm2": 2 * self.karras_steps}
        return per_step.get(self.sampler, self.karras_steps)


PRESETS: Dict[str, SamplingPreset] = {
    "default": SamplingPreset("default", "heun", 64),
    "fast": SamplingPreset("fast", "dpmpp_2m", FAST_STEPS),
}


def get_preset(name: str) -> SamplingPreset:
    """The preset called `name`; ValueError listing the valid names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"preset={name!r} is unknown; use one of {sorted(PRESETS)}")
    return PRESETS[name]


def resolve_preset(
    preset: Optional[Union[str, SamplingPreset]] = None,
    *,
    sampler: Optional[str] = None,
    use_karras: Optional[bool] = None,
    karras_steps: Optional[int] = None,
    sigma_min: Optional[float] = None,
    sigma_max: Optional[float] = None,
    s_churn: Optional[float] = None,
) -> SamplingPreset:
    """The settings to sample with: every argument that is not None wins over the preset.

    `preset` is a `SamplingPreset` or a name in `PRESETS`; None starts from "default". The result
    keeps the preset's name even when some of its fields were overridden.
    """
    if isinstance(preset, SamplingPreset):
        base = preset
    elif preset is None or isinstance(preset, str):
        base = get_preset("default" if preset is None else preset)
    else:
        raise ValueError(f"preset must be a SamplingPreset or one of {sorted(PRESETS)}, got {preset!r}")
    given = dict(sampler=sampler, use_karras=use_karras, karras_steps=karras_steps,
                 sigma_min=sigma_min, sigma_max=sigma_max, s_churn=s_churn)
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def check_guidance_max_sigma(max_sigma: Optional[float], name: str = "guidance_max_sigma") -> None:
    """Raise ValueError (naming `name`) unless `max_sigma` is None or a positive number."""
    if max_sigma is None:
        return
    if isinstance(max_sigma, bool) or not isinstance(max_sigma, (int, float)) or not max_sigma > 0:
        raise ValueError(f"{name} must be a positive number (or None), got {max_sigma!r}")
