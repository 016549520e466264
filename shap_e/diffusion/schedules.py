"""Beta schedules and timestep respacing (float64 numpy, docs/behaviour.md#beta-schedules), with the
official names and signatures; `shap_e.diffusion.gaussian_diffusion` re-exports them."""
import math
from typing import Callable, Iterable, List, Set, Tuple, Union

import numpy as np

__all__ = [
    "SCHEDULE_NAMES", "betas_for_alpha_bar", "get_beta_schedule", "get_named_beta_schedule",
    "respace_betas", "space_timesteps",
]

# Each schedule's optional arguments and their defaults.
_SCHEDULE_ARGS = {
    "linear": {},
    "cosine": {},
    "inv_parabola": {"power": 2.0},
    "translated_parabola": {"power": 2.0},
    "exp": {"coefficient": -12.0},
}
SCHEDULE_NAMES = tuple(_SCHEDULE_ARGS)


def betas_for_alpha_bar(
    num_diffusion_timesteps: int, alpha_bar: Callable[[float], float], max_beta: float = 0.999
) -> np.ndarray:
    """Discretise a continuous ᾱ(s), s in [0, 1], into `[num_diffusion_timesteps]` float64 betas.

    β_i = min(1 − ᾱ((i+1)/T) / ᾱ(i/T), max_beta) (Nichol & Dhariwal 2021, eq. 17).
    """
    betas = []
    for i in range(num_diffusion_timesteps):
        s0, s1 = i / num_diffusion_timesteps, (i + 1) / num_diffusion_timesteps
        betas.append(min(1 - alpha_bar(s1) / alpha_bar(s0), max_beta))
    return np.array(betas, dtype=np.float64)


def get_beta_schedule(
    beta_schedule: str, *, beta_start: float, beta_end: float, num_diffusion_timesteps: int
) -> np.ndarray:
    """`[num_diffusion_timesteps]` float64 betas from `beta_start` to `beta_end`; only "linear"."""
    if beta_schedule != "linear":
        raise ValueError(f"beta_schedule={beta_schedule!r} is unknown; only 'linear' (see get_named_beta_schedule)")
    return np.linspace(beta_start, beta_end, num_diffusion_timesteps, dtype=np.float64)


def get_named_beta_schedule(
    schedule_name: str, num_diffusion_timesteps: int, **extra_args: float
) -> np.ndarray:
    """Betas `[num_diffusion_timesteps]` (float64) of a named schedule.

    :param schedule_name: `linear` (DDPM's, scaled to any T), `cosine`, `inv_parabola`
        (ᾱ = 1 − s^power, default power 2), `translated_parabola` (ᾱ = (1 − s)^power, default 2)
        or `exp` (ᾱ = e^(coefficient·s), default coefficient −12: the released Shap-E prior).
    """
    if schedule_name not in _SCHEDULE_ARGS:
        raise ValueError(f"schedule={schedule_name!r} is unknown; use one of {list(SCHEDULE_NAMES)}")
    steps = num_diffusion_timesteps
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"num_diffusion_timesteps must be a positive int, got {steps!r}")
    unknown = sorted(set(extra_args) - set(_SCHEDULE_ARGS[schedule_name]))
    if unknown:
        raise ValueError(
            f"schedule_args {unknown} are not used by schedule {schedule_name!r}; "
            f"valid: {list(_SCHEDULE_ARGS[schedule_name])}"
        )
    args = {**_SCHEDULE_ARGS[schedule_name], **{k: float(v) for k, v in extra_args.items()}}
    if schedule_name == "linear":
        # Scaled so that any T spans the same noise range as DDPM's T=1000 schedule.
        scale = 1000 / steps
        return get_beta_schedule("linear", beta_start=scale * 0.0001, beta_end=scale * 0.02,
                                 num_diffusion_timesteps=steps)
    alpha_bars = {
        "cosine": lambda s: math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2,
        "inv_parabola": lambda s: 1 - s ** args["power"],
        "translated_parabola": lambda s: (1 - s) ** args["power"],
        "exp": lambda s: math.exp(s * args["coefficient"]),
    }
    return betas_for_alpha_bar(steps, alpha_bars[schedule_name])


def space_timesteps(num_timesteps: int, section_counts: Union[str, Iterable[int]]) -> Set[int]:
    """Timesteps of the original process to keep when respacing (improved DDPM, §4).

    :param section_counts: `"ddimN"` (N evenly strided steps, as DDIM), `"exactA,B,..."` (exactly
        those timesteps), a comma-separated string `"10,15,20"` or a list of ints: the process is
        cut into equal sections and each section keeps that many evenly spaced steps.
    """
    if isinstance(section_counts, str):
        if section_counts.startswith("ddim"):
            return _ddim_timesteps(num_timesteps, int(section_counts[len("ddim"):]))
        if section_counts.startswith("exact"):
            return _exact_timesteps(num_timesteps, section_counts[len("exact"):])
        section_counts = [int(x) for x in section_counts.split(",")]
    counts = list(section_counts)
    if not counts:
        raise ValueError("respacing must name at least one section, e.g. '64' or 'ddim50'")
    size_per, extra = divmod(num_timesteps, len(counts))
    kept: List[int] = []
    start = 0
    for i, count in enumerate(counts):
        size = size_per + (1 if i < extra else 0)
        if count < 1 or count > size:
            raise ValueError(f"respacing section {i} asks for {count} steps out of {size}")
        stride = 1.0 if count <= 1 else (size - 1) / (count - 1)
        position = 0.0
        for _ in range(count):
            # Accumulated (not multiplied) position: the reference rounds this running sum.
            kept.append(start + round(position))
            position += stride
        start += size
    return set(kept)


def _ddim_timesteps(num_timesteps: int, desired: int) -> Set[int]:
    for stride in range(1, num_timesteps):
        if len(range(0, num_timesteps, stride)) == desired:
            return set(range(0, num_timesteps, stride))
    raise ValueError(f"respacing 'ddim{desired}' is impossible with {num_timesteps} timesteps")


def _exact_timesteps(num_timesteps: int, listed: str) -> Set[int]:
    kept = {int(x) for x in listed.split(",")}
    outside = sorted(t for t in kept if not 0 <= t < num_timesteps)
    if outside:
        raise ValueError(f"respacing 'exact...' names timesteps {outside} outside [0, {num_timesteps})")
    return kept


def respace_betas(alphas_cumprod: np.ndarray, keep: Set[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Betas of the sub-process through the kept timesteps, and the map new index -> old t.

    :return: `(betas [K] float64, timestep_map [K] int64)`.
    """
    betas, timestep_map = [], []
    last = 1.0
    for i, alpha_cumprod in enumerate(alphas_cumprod):
        if i in keep:
            betas.append(1 - alpha_cumprod / last)
            last = alpha_cumprod
            timestep_map.append(i)
    return np.array(betas, dtype=np.float64), np.array(timestep_map, dtype=np.int64)
