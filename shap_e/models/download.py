"""Checksummed, cached downloads of released weights, and `load_model` / `load_config`.

Downloads stream into a temporary file next to the destination and are renamed into place only
after the sha256 matches, under a file lock, so a cache never holds a partial or wrong file under
its final name. Weights are read with `weights_only=True` (or from `.safetensors`): a checkpoint
can never run code.
"""
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch
import torch.nn as nn
import yaml
from filelock import FileLock
from tqdm.auto import tqdm

from shap_e.models.registry import ModelSpec, config_path, get_spec

__all__ = [
    "ChecksumError",
    "DownloadError",
    "default_cache_dir",
    "hash_file",
    "fetch_file_cached",
    "load_config",
    "load_checkpoint",
    "load_state_dict_file",
    "load_state_dict_strict",
    "load_model",
]

PathLike = Union[str, os.PathLike]
_CHUNK = 1 << 20


class ChecksumError(RuntimeError):
    """A file's sha256 differs from the expected one."""

    def __init__(self, path: PathLike, expected: str, actual: str, hint: str = "") -> None:
        self.path, self.expected, self.actual = Path(path), expected, actual
        super().__init__(f"{path} has sha256 {actual} but {expected} was expected. {hint}".strip())


class DownloadError(RuntimeError):
    """A download could not be completed (network absent, HTTP error, interrupted transfer)."""


def default_cache_dir() -> Path:
    """`$SHAP_E_CACHE` if set, else `~/.cache/shap_e` (read on every call, so tests can move it)."""
    env = os.environ.get("SHAP_E_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "shap_e"


def hash_file(path: PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _offline_message(url: str, dest: Path, sha256: str, reason: str) -> str:
    return (
        f"could not download {url} ({reason}).\n"
        f"Without network access, fetch the file elsewhere and place it at\n  {dest}\n"
        f"(its sha256 must be {sha256}), e.g. with\n"
        f"  curl -L --create-dirs -o '{dest}' '{url}'\n"
        "or point cache_dir= / $SHAP_E_CACHE at a folder that already holds it."
    )


def _stream_to(url: str, out, progress: bool, desc: str, timeout: float) -> str:
    """Copy `url` into the open binary file `out`; return the hex sha256 of what was written."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length is not None else None
        received = 0
        with tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not progress) as bar:
            for block in iter(lambda: response.read(_CHUNK), b""):
                out.write(block)
                digest.update(block)
                received += len(block)
                bar.update(len(block))
    # urllib returns a short body without complaint when the server closes early.
    if total is not None and received != total:
        raise DownloadError(
            f"transfer of {url} was interrupted: received {received} of {total} bytes; "
            "nothing was cached, call again to retry"
        )
    return digest.hexdigest()


def _download(url: str, dest: Path, sha256: str, progress: bool, timeout: float) -> None:
    """Download into a temporary file in `dest`'s folder; rename it to `dest` once the hash matches."""
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _stream_to(url, out, progress, dest.name, timeout)
        if actual != sha256:
            raise ChecksumError(url, sha256, actual, "The download was discarded; nothing was cached.")
        os.chmod(tmp_name, 0o644)  # mkstemp creates 0600; cached weights are readable like any download
        os.replace(tmp_name, dest)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        else:
            reason = str(getattr(e, "reason", e))
        raise DownloadError(_offline_message(url, dest, sha256, reason)) from e
    finally:
        if os.path.exists(tmp_name):
            os.remove(tmp_name)


def fetch_file_cached(
    url: str,
    sha256: str,
    cache_dir: Optional[PathLike] = None,
    progress: bool = True,
    *,
    filename: Optional[str] = None,
    redownload: bool = False,
    timeout: float = 30.0,
) -> Path:
    """Return the path of a verified local copy of `url`, downloading it into the cache if needed.

    :param url: http(s) or file URL.
    :param sha256: expected hex sha256; the file is only ever cached under its final name if it matches.
    :param cache_dir: folder of the cache (default `default_cache_dir()`).
    :param progress: show a tqdm progress bar while downloading.
    :param filename: name inside the cache (default: the URL's last path segment).
    :param redownload: replace a cached file whose hash is wrong instead of raising ChecksumError.
    :param timeout: seconds to wait on the network before giving up.
    :raises ChecksumError: a cached or downloaded file has the wrong hash (path, expected, actual).
    :raises DownloadError: no network, HTTP error or interrupted transfer (names URL and cache path).
    """
    if not isinstance(sha256, str) or len(sha256) != 64:
        raise ValueError(f"sha256={sha256!r} must be a 64-digit hex string")
    sha256 = sha256.lower()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / (filename or url.rstrip("/").split("/")[-1])
    with FileLock(str(dest) + ".lock"):
        if dest.exists():
            actual = hash_file(dest)
            if actual == sha256:
                return dest
            if not redownload:
                raise ChecksumError(dest, sha256, actual, "Delete it, or pass redownload=True to replace it.")
            dest.unlink()
        _download(url, dest, sha256, progress, timeout)
    return dest


def weights_cached(name: str, cache_dir: Optional[PathLike] = None) -> bool:
    """Whether a registered model's weights are already in the cache (no network, no hashing)."""
    spec = get_spec(name)
    if not spec.has_weights:
        return False
    if spec.bundled_weights is not None:
        return spec.bundled_weights.is_file()
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return (cache / spec.url.rstrip("/").split("/")[-1]).is_file()


def available_model(preferred: str, fallback: Optional[str] = None, cache_dir: Optional[PathLike] = None) -> str:
    """`preferred` when its weights are cached, else a registered `fallback`, else `preferred`.

    Never touches the network: notebooks and the CLI use it to run offline on a bundled model
    when the official weights have not been downloaded.
    """
    from shap_e.models.registry import MODELS

    if weights_cached(preferred, cache_dir) or fallback is None or fallback not in MODELS:
        return preferred
    return fallback


def _read_yaml(path: PathLike) -> Dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def load_config(
    name: str, cache_dir: Optional[PathLike] = None, *, official: bool = False, progress: bool = False
) -> Dict[str, Any]:
    """The config dict of a registered model.

    :param name: a registry name (`transmitter`, `decoder`, `text300M`, `image300M`, `diffusion`, ...).
    :param official: download the official YAML (checked against its sha256) instead of reading the
        copy shipped in `shap_e/configs/`.
    """
    spec = get_spec(name)
    if not official:
        return _read_yaml(config_path(spec))
    if spec.config_url is None or spec.config_sha256 is None:
        raise ValueError(f"model {name!r} has no official config to download; use official=False")
    return _read_yaml(fetch_file_cached(spec.config_url, spec.config_sha256, cache_dir, progress))


def load_state_dict_file(path: PathLike, device: Union[str, torch.device] = "cpu") -> Dict[str, torch.Tensor]:
    """Read a flat `{name: tensor}` checkpoint from `.safetensors` or a torch file, never unpickling code."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device=str(device))
        else:
            state = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # the readers raise assorted types for truncated or foreign files
        raise ValueError(
            f"checkpoint {path} could not be read ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
            "it is probably truncated or corrupt (delete it and download it again), or it holds "
            "pickled objects other than tensors, which are refused for safety"
        ) from e
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"checkpoint {path} must hold a flat dict of tensors (a state_dict)")
    return dict(state)


def load_checkpoint(
    name: str,
    device: Union[str, torch.device, None] = None,
    cache_dir: Optional[PathLike] = None,
    progress: bool = True,
) -> Dict[str, torch.Tensor]:
    """Download (if needed) and read the weights of a registered model."""
    spec = get_spec(name)
    if not spec.has_weights:
        raise ValueError(f"model {name!r} is config-only ({spec.description}); it has no weights to load")
    if spec.bundled_weights is not None:
        return load_state_dict_file(verified_bundled_weights(spec), _device(device))
    path = fetch_file_cached(spec.url, spec.sha256, cache_dir, progress)
    return load_state_dict_file(path, _device(device))


def verified_bundled_weights(spec: ModelSpec) -> Path:
    """The path of a model's package-bundled weights after a sha256 check."""
    path = spec.bundled_weights
    if not path.is_file():
        raise FileNotFoundError(
            f"the bundled weights of {spec.name!r} are missing ({path}); reinstall the package"
        )
    actual = hash_file(path)
    if actual != spec.sha256:
        raise ChecksumError(str(path), spec.sha256, actual, "The installed package is damaged; reinstall it.")
    return path


def _device(device: Union[str, torch.device, None]) -> torch.device:
    """A validated torch.device (`None` means cpu); a bad string raises a ValueError with examples."""
    from shap_e.util.config import resolve_device

    return resolve_device(device) or torch.device("cpu")


def _first(keys, n: int = 5) -> str:
    keys = list(keys)
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more


def load_state_dict_strict(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """`model.load_state_dict(state, strict=True)` with an error listing the first bad keys."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in own if k in state and state[k].shape != own[k].shape
    ]
    problems = [
        f"{len(items)} {what}: {_first(items)}"
        for what, items in (("missing keys", missing), ("unexpected keys", unexpected),
                            ("mis-shaped keys", mismatched))
        if items
    ]
    if problems:
        raise ValueError(
            f"weights from {source} do not fit {type(model).__name__}: " + "; ".join(problems)
            + ". Check that the config matches the checkpoint."
        )
    model.load_state_dict(state, strict=True)


def load_model(
    name: str,
    device: Union[str, torch.device, None] = None,
    cache_dir: Optional[PathLike] = None,
    progress: bool = True,
    *,
    weights_path: Optional[PathLike] = None,
    config: Optional[Union[Mapping[str, Any], PathLike]] = None,
) -> nn.Module:
    """Build a registered model from its config and load its weights strictly; returns it in eval mode.

    :param name: a registry name with weights (`transmitter`, `decoder`, `text300M`, `image300M`, or
        one added with `register_model`).
    :param device: `None` (cpu), `'cpu'`, `'cuda'`, `'cuda:0'`, `'mps'` or a `torch.device`.
    :param cache_dir: download cache (default `$SHAP_E_CACHE`, else `~/.cache/shap_e`).
    :param weights_path: a local `.pt`/`.safetensors` state_dict to use instead of downloading.
    :param config: a config dict or YAML path to use instead of the registered one.
    """
    from shap_e.models.configs import model_from_config
    from shap_e.util.config import skip_weight_init

    dev = _device(device)
    spec: ModelSpec = get_spec(name)
    if not spec.has_weights and weights_path is None:
        raise ValueError(
            f"model {name!r} is config-only ({spec.description}); use load_config({name!r}) "
            "and build the diffusion from that config"
        )
    cfg = config if config is not None else load_config(name)
    if weights_path is not None:
        state, source = load_state_dict_file(weights_path, dev), str(weights_path)
    else:
        state, source = load_checkpoint(name, dev, cache_dir, progress), spec.url or spec.weights_file
    with skip_weight_init():  # every persistent tensor is overwritten by the strict load below
        model = model_from_config(cfg, device=dev)
    load_state_dict_strict(model, state, source)
    return model.eval()
