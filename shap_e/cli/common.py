"""Pieces shared by the commands: device choice, model choice, atomic output folders, sampling options."""
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def say(message: str) -> None:
    print(message, file=sys.stderr)


def pick_device(name: str) -> torch.device:
    """`auto` picks CUDA, then MPS, then the CPU, and says which."""
    if name == "auto":
        if torch.cuda.is_available():
            device = torch.device("cuda")
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            device = torch.device("mps")
        else:
            device = torch.device("cpu")
        say(f"device: {device} (auto)")
        return device
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device cuda was asked for but no CUDA device is available; use --device cpu")
    return torch.device(name)


def choose_model(requested: Optional[str], official: str, small: str, cache_dir: Optional[str]) -> str:
    """The requested model, else the official one if cached, else the small bundled one."""
    from shap_e.models.download import weights_cached
    from shap_e.models.registry import MODELS

    if requested:
        if requested not in MODELS:
            raise CliError(f"--model {requested!r} is not in the registry; known: {', '.join(sorted(MODELS))}")
        return requested
    if weights_cached(official, cache_dir):
        say(f"model: {official} (official weights found in the cache)")
        return official
    if small in MODELS:
        say(f"model: {small} (bundled); for the official model run `shap-e download {official}`")
        return small
    raise CliError(
        f"no model available offline: the official {official} weights are not in the cache and no small "
        f"bundled model is installed; run `shap-e download {official}` (needs network)"
    )


@contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary folder beside `final`; it becomes `final` only if the block succeeds."""
    parent = final.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
    except OSError as e:
        raise CliError(f"cannot write to {parent}: {e.strerror or e}") from e
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def add_vertex_placement_option(parser) -> None:
    from shap_e.rendering.stf import VERTEX_PLACEMENTS

    parser.add_argument(
        "--vertex-placement", choices=VERTEX_PLACEMENTS, default="reference",
        help="mesh vertices as the release places them (shrunk by (G-1)/(G+1)) or on the true surface",
    )


def add_init_strength_option(parser) -> None:
    parser.add_argument("--init-strength", type=float,
                        help="for an image prior with a latent head: start sampling from the latent it reads off the "
                        "picture, at this SDEdit strength in (0, 1]; 1 samples from noise (default: the model's "
                        "recommended value, else 1)")


def resolve_init_strength(requested: Optional[float], recommended: Optional[float], prior, name: str) -> float:
    """The SDEdit strength to sample with: `requested`, else the registry's `recommended`, else 1
    (from noise). Below 1 the prior must have a latent head."""
    from shap_e.diffusion.sample import check_strength

    strength = requested if requested is not None else (recommended if recommended is not None else 1.0)
    try:
        check_strength(strength, "--init-strength")
    except ValueError as error:
        raise CliError(str(error)) from None
    if strength < 1 and getattr(prior, "latent_head", None) is None:
        raise CliError(f"--init-strength {strength} needs a prior with a latent head; {name!r} has none (use 1)")
    return strength


EVERY_STEP = "all"


def _max_sigma_argument(value: str) -> Union[float, str]:
    """`--guidance-max-sigma`: a positive number, or `all` (guide every step)."""
    import argparse

    if value.strip().lower() == EVERY_STEP:
        return EVERY_STEP
    try:
        sigma = float(value)
    except ValueError:
        sigma = float("nan")
    if not sigma > 0 or sigma == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is neither a positive number nor {EVERY_STEP!r}")
    return sigma


def add_guidance_max_sigma_option(parser) -> None:
    parser.add_argument("--guidance-max-sigma", type=_max_sigma_argument, metavar="SIGMA|all",
                        help="classifier-free guidance only at the sampler steps with sigma <= SIGMA, the conditional "
                        f"prediction alone above; {EVERY_STEP!r} guides every step (default: the model's recommended "
                        f"value, else {EVERY_STEP})")


def resolve_guidance_max_sigma(requested: Union[float, str, None], recommended: Optional[float]) -> Optional[float]:
    """The `guidance_max_sigma` to sample with: `requested` (None when it is `all`), else the registry's
    `recommended` (None: every step)."""
    if requested is None:
        return recommended
    return None if requested == EVERY_STEP else requested
