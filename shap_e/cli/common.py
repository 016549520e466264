"""Pieces shared by the commands: device and model choice, output locations, checked options."""
import sys
from pathlib import Path
from typing import Optional, Union

import torch

from shap_e.util.atomic import check_writable, clean_stale_temporaries
from shap_e.util.checks import check_int, check_number
from shap_e.util.errors import InvalidArgumentError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_SEED = 2**63 - 1


class CliError(InvalidArgumentError):
    """Bad input: printed as one line, exit status 2."""


def say(message: str) -> None:
    print(message, file=sys.stderr)


def pick_device(name: str) -> torch.device:
    """`auto` picks CUDA, then MPS, then the CPU, and says which; a named device must exist here."""
    from shap_e.util.config import available_devices, resolve_device

    if name == "auto":
        available = available_devices()
        device = torch.device(next((d for d in available if d != "cpu"), "cpu"))
        say(f"device: {device} (auto)")
        return device
    return resolve_device(name)


def check_seed(seed: int, count: int = 1) -> None:
    """Seeds `seed .. seed + count - 1` must fit torch's generator (0 .. 2**63 - 1)."""
    check_int(seed, "--seed", 0, MAX_SEED - count + 1)


def prepare_output_folder(folder: Union[str, Path]) -> Path:
    """Check, before any model is loaded, that `folder` can be written (creating it and its
    parents), and remove the temporaries that killed runs of this package left in it."""
    folder = check_writable(folder)
    for stale in clean_stale_temporaries(folder):
        say(f"removed {stale.name}, left by an interrupted run")
    return folder


def choose_model(requested: Optional[str], official: str, small: str, cache_dir: Optional[str],
                 kind: Optional[str] = None) -> str:
    """The requested model, else the official one if its cached weights are complete and correct,
    else the small bundled one (saying why). `kind` (`text`, `image`, `transmitter`): the kind of
    model the command needs; a registered model of another kind is refused, naming the command it
    belongs to."""
    from shap_e.models.cache import CORRUPT, cache_state
    from shap_e.models.registry import MODELS

    if requested:
        if requested not in MODELS:
            raise CliError(f"--model {requested!r} is not in the registry; known: {', '.join(sorted(MODELS))}")
        check_kind(requested, kind)
        return requested
    state = cache_state(official, cache_dir)
    if state == "ok":
        say(f"model: {official} (official weights found in the cache)")
        return official
    if small in MODELS:
        if state == CORRUPT:
            say(f"model: {small} (bundled); the cached {official} weights are partial or corrupt: run "
                f"`shap-e download {official} --redownload` to use it")
        else:
            say(f"model: {small} (bundled); for the official model run `shap-e download {official}`")
        return small
    raise CliError(
        f"no model available offline: the official {official} weights are not in the cache and no small "
        f"bundled model is installed; run `shap-e download {official}` (needs network)"
    )


_COMMANDS = {"text": "shap-e text", "image": "shap-e image", "transmitter": "shap-e encode/decode/render",
             "decoder": "shap-e decode/render", "diffusion": "load_config (it is a diffusion config)"}
_ARTICLES = {"text": "a text model", "image": "an image model", "transmitter": "a transmitter",
             "decoder": "a decoder", "diffusion": "a diffusion config"}


def check_kind(name: str, needed: Optional[str]) -> None:
    """Refuse registry model `name` when it is not of the `needed` kind (a transmitter may decode too)."""
    from shap_e.models.registry import get_spec

    kind = get_spec(name).kind
    if needed is None or kind is None or kind == needed or (needed == "decoder" and kind == "transmitter"):
        return
    raise CliError(f"{name} is {_ARTICLES[kind]}: use {_COMMANDS[kind]}")


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
    (from noise). Below 1 the prior must have a latent head (not checked when `prior` is None)."""
    from shap_e.diffusion.sample import check_strength

    strength = requested if requested is not None else (recommended if recommended is not None else 1.0)
    check_strength(strength, "--init-strength")
    if prior is not None and strength < 1 and getattr(prior, "latent_head", None) is None:
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
        raise argparse.ArgumentTypeError(f"{value[:40]!r} is neither a positive number nor {EVERY_STEP!r}")
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


def check_guidance(value: float, name: str = "--guidance") -> float:
    from shap_e.diffusion.checks import GUIDANCE_LIMIT

    return check_number(value, name, -GUIDANCE_LIMIT, GUIDANCE_LIMIT)
