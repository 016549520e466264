"""Config helpers shared by every layer: read a config, check its keys, build settings, resolve devices.

Configs are plain dicts (the release YAMLs' content); these helpers give every builder the same
errors: an unknown key names the valid ones, a bad device says what would work.
"""
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, TypeVar, Union

import torch
import torch.nn as nn
import yaml

from shap_e.util.errors import DeviceUnavailableError, InvalidArgumentError

__all__ = [
    "ConfigLike", "available_devices", "check_device_available", "check_keys", "read_config", "resolve_device",
    "settings_of", "skip_weight_init",
]

ConfigLike = Union[Mapping[str, Any], str, Path]
T = TypeVar("T")


def read_config(config: ConfigLike) -> Dict[str, Any]:
    """A config dict, or the dict in a YAML file."""
    if isinstance(config, (str, Path)):
        path = Path(config)
        if not path.is_file():
            raise ValueError(f"config={str(config)!r} is not a file; pass a config dict or a YAML path")
        with open(path) as f:
            config = yaml.safe_load(f)
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping with a 'name' key, got {type(config).__name__}")
    return dict(config)


@contextmanager
def skip_weight_init():
    """Build modules without random initialisation, for weights that are loaded right after.

    Every `torch.nn.init.*_` function becomes a no-op inside the block (that is how `nn.Linear`,
    `nn.LayerNorm` and this package initialise), so tensors keep their uninitialised memory. Saves
    seconds per 300M-parameter model.
    """
    names = [n for n in dir(nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(nn.init, n) for n in names}
    try:
        for n in names:
            setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def check_keys(config: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Raise a ValueError naming the unknown keys of `config` and listing the valid ones."""
    allowed = set(allowed)
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in the {where} config; valid keys: {sorted(allowed)}")


def settings_of(config: Mapping[str, Any], key: str, settings_class: Callable[..., T]) -> T:
    """`settings_class` (a dataclass) built from `config[key]`, a mapping of its fields (absent, None or
    `{}`: the defaults); a ValueError names `key` for anything else or for an unknown field."""
    settings = config.get(key)
    settings = {} if settings is None else settings
    if not isinstance(settings, Mapping):
        raise ValueError(f"{key} must be a mapping of settings ({{}} for the defaults), got {settings!r}")
    check_keys(settings, {f.name for f in fields(settings_class)}, key)
    return settings_class(**settings)


def resolve_device(device: Optional[Union[str, torch.device]]) -> Optional[torch.device]:
    """Validate a device argument early: a valid name of a device this computer has.

    Raises InvalidArgumentError for a malformed name and DeviceUnavailableError for a device that is
    not here (naming the ones that are). None stays None.
    """
    if device is None:
        return None
    if not isinstance(device, torch.device):
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise InvalidArgumentError(
                f"device={device!r} is not a valid device; use 'cpu', 'cuda', 'cuda:0' or 'mps'"
            ) from e
    check_device_available(device)
    return device


def available_devices() -> List[str]:
    """The devices this computer has: `cpu`, then `cuda:0`, `cuda:1`, ... and `mps` where present."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def check_device_available(device: torch.device) -> None:
    """Raise DeviceUnavailableError naming `device` and the available ones unless this computer has it."""
    available = available_devices()
    if device.type == "cpu" or (device.type == "mps" and "mps" in available):
        return
    if device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count():
        return
    if device.type in ("cuda", "mps", "cpu"):
        raise DeviceUnavailableError(
            f"device {str(device)!r} is not available on this computer; available: {', '.join(available)}"
        )
