"""Beta schedules and timestep respacing (float64 numpy, docs/behaviour.md#beta-schedules)."""
import math
from typing import Callable, Iterable, List, Set, Tuple, Union

import numpy as np

SCHEDULE_NAMES = ("linear", "cosine", "inv_parabola", "exp")
_SCHEDULE_ARGS = {"linear": (), "cosine": (), "inv_parabola": ("power",), "exp": ("coefficient",)}


def betas_for_alpha_bar(
    num_timesteps: int, alpha_bar: Callable[[float], float], max_beta: float = 0.999
) -> np.ndarray:
    """Discretise a continuous ᾱ(s), s in [0, 1], into `[num_timesteps]` float64 betas.

    β_i = min(1 − ᾱ((i+1)/T) / ᾱ(i/T), max_beta) (Nichol & Dhariwal 2021, eq. 17).
    """
    betas = []
    for i in range(num_timesteps):
        s0, s1 = i / num_timesteps, (i + 1) / num_timesteps
        betas.append(min(1 - alpha_bar(s1) / alpha_bar(s0), max_beta))
    return np.array(betas, dtype=np.float64)


def get_named_beta_schedule(name: str, timesteps: int, **schedule_args: float) -> np.ndarray:
    """Betas `[timesteps]` (float64) of a named schedule.

    :param name: one of `linear`, `cosine`, `inv_parabola` (arg `power`, default 1.0) or
        `exp` (arg `coefficient`, default -12.0; the released Shap-E prior).
    """
    if name not in _SCHEDULE_ARGS:
        raise ValueError(f"schedule={name!r} is unknown; use one of {list(SCHEDULE_NAMES)}")
    if not isinstance(timesteps, int) or timesteps < 1:
        raise ValueError(f"timesteps must be a positive int, got {timesteps!r}")
    unknown = sorted(set(schedule_args) - set(_SCHEDULE_ARGS[name]))
    if unknown:
        raise ValueError(
            f"schedule_args {unknown} are not used by schedule {name!r}; "
            f"valid: {list(_SCHEDULE_ARGS[name])}"
        )
    if name == "linear":
        # Scaled so that any T spans the same noise range as DDPM's T=1000 schedule.
        scale = 1000 / timesteps
        return np.linspace(scale * 0.0001, scale * 0.02, timesteps, dtype=np.float64)
    if name == "cosine":
        return betas_for_alpha_bar(
            timesteps, lambda s: math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
        )
    if name == "inv_parabola":
        power = float(schedule_args.get("power", 1.0))
        return betas_for_alpha_bar(timesteps, lambda s: 1 - s**power)
    coefficient = float(schedule_args.get("coefficient", -12.0))
    return betas_for_alpha_bar(timesteps, lambda s: math.exp(s * coefficient))


def space_timesteps(num_timesteps: int, section_counts: Union[str, Iterable[int]]) -> Set[int]:
    """Timesteps of the original process to keep when respacing (improved DDPM, §4).

    :param section_counts: `"ddimN"` (N evenly strided steps, as DDIM), a comma-separated string
        `"10,15,20"` or a list of ints: the process is cut into equal sections and each section
        keeps that many evenly spaced steps.
    """
    if isinstance(section_counts, str):
        if section_counts.startswith("ddim"):
            return _ddim_timesteps(num_timesteps, int(section_counts[len("ddim"):]))
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
