"""Checksummed, cached downloads of released weights, and `load_model` / `load_config` (official API).

Downloads stream into a temporary file next to the destination and are renamed into place only
after the sha256 matches, so a cache never holds a partial or wrong file under its final name; a
file already in the cache counts only once its size and sha256 were checked (`models.cache`).
Every failure is one line: offline, the error names the URL, the cache path and the command that
retries. Weights are read with `weights_only=True` (or from `.safetensors`): a checkpoint can never
run code.
"""
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch
import torch.nn as nn
import yaml
from filelock import FileLock
from tqdm.auto import tqdm

from shap_e.models.cache import (
    CORRUPT,
    OK,
    available_model,
    cache_folder,
    default_cache_dir,
    file_state,
    hash_file,
    record_verified,
    weights_cached,
)
from shap_e.models import registry
from shap_e.models.registry import ModelSpec, config_path, get_spec
from shap_e.models.weights_io import assign_state
from shap_e.util.atomic import temporary_path
from shap_e.util.errors import ChecksumError, CorruptFileError, DownloadError, InvalidArgumentError
from shap_e.util.tensor_files import read_tensor_file

__all__ = [
    "ChecksumError",
    "DownloadError",
    "available_model",
    "check_hash",
    "default_cache_dir",
    "hash_file",
    "fetch_file_cached",
    "load_config",
    "load_checkpoint",
    "load_state_dict_file",
    "load_state_dict_strict",
    "load_model",
    "weights_cached",
]

PathLike = Union[str, os.PathLike]


def check_hash(path: PathLike, expected_hash: str) -> None:
    """Raise ChecksumError (a RuntimeError) unless the file at `path` hashes to `expected_hash`."""
    actual = hash_file(path)
    if actual != expected_hash:
        raise ChecksumError(path, expected_hash, actual, "Delete it and run this call again.")


def _model_for_url(url: str) -> Optional[str]:
    return next((name for name, spec in registry.MODELS.items() if url in (spec.url, spec.config_url)), None)


def _known_hash(url: str) -> str:
    for spec in registry.MODELS.values():
        if url == spec.url and spec.sha256:
            return spec.sha256
        if url == spec.config_url and spec.config_sha256:
            return spec.config_sha256
    raise InvalidArgumentError(f"no sha256 is known for {url}; pass sha256= (64 hex digits) to download it")


def _retry_command(url: str) -> str:
    name = _model_for_url(url)
    return f"`shap-e download {name}`" if name is not None else "the same call"


def _offline_message(url: str, dest: Path, sha256: str, reason: str) -> str:
    return (f"cannot download {url} ({reason}); the network is unreachable or the server failed, and nothing was "
            f"cached. Retry with {_retry_command(url)} when online, or place the file (sha256 {sha256}) at {dest}")


def _stream_to(url: str, out, progress: bool, dest: Path, timeout: float, chunk_size: int) -> str:
    """Copy `url` into the open binary file `out`; return the hex sha256 of what was written."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length is not None and length.isdigit() else None
        received = 0
        with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, disable=not progress) as bar:
            for block in iter(lambda: response.read(chunk_size), b""):
                out.write(block)
                digest.update(block)
                received += len(block)
                bar.update(len(block))
    # urllib returns a short body without complaint when the server closes early.
    if total is not None and received != total:
        raise DownloadError(
            f"the transfer of {url} was interrupted after {received} of {total} bytes; nothing was cached at "
            f"{dest}. Retry with {_retry_command(url)}"
        )
    return digest.hexdigest()


def _download(url: str, dest: Path, sha256: str, progress: bool, timeout: float, chunk_size: int) -> None:
    """Download into a temporary file in `dest`'s folder; rename it to `dest` once the hash matches."""
    tmp = temporary_path(dest)
    try:
        with open(tmp, "wb") as out:
            actual = _stream_to(url, out, progress, dest, timeout, chunk_size)
        if actual != sha256:
            raise ChecksumError(url, sha256, actual, "The download was discarded; nothing was cached.")
        os.replace(tmp, dest)
        record_verified(dest, sha256)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        if isinstance(e, (DownloadError, ChecksumError)):
            raise
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        else:
            reason = str(getattr(e, "reason", None) or e) or type(e).__name__
        raise DownloadError(_offline_message(url, dest, sha256, reason)) from None
    finally:
        tmp.unlink(missing_ok=True)


def fetch_file_cached(
    url: str,
    progress: bool = True,
    cache_dir: Optional[PathLike] = None,
    chunk_size: int = 4096,
    *,
    sha256: Optional[str] = None,
    filename: Optional[str] = None,
    redownload: bool = False,
    timeout: Optional[float] = None,
) -> str:
    """The path of a verified local copy of `url`, downloading it into the cache if needed.

    :param url: http(s) or file URL.
    :param progress: show a tqdm progress bar while downloading.
    :param cache_dir: folder of the cache (default `default_cache_dir()`).
    :param chunk_size: bytes read from the network at a time.
    :param sha256: expected hex sha256; default: the registry's hash for `url` (the official files).
        A file is only ever cached under its final name if it matches.
    :param filename: name inside the cache (default: the URL's last path segment).
    :param redownload: replace a cached file whose hash is wrong instead of raising ChecksumError.
    :param timeout: seconds to wait on a silent network before giving up (default:
        `$SHAP_E_DOWNLOAD_TIMEOUT`, else 30).
    :raises ChecksumError: a cached or downloaded file has the wrong hash (path, expected, actual).
    :raises DownloadError: no network, HTTP error, stalled or interrupted transfer (names the URL,
        the cache path and the command that retries).
    """
    sha256 = _known_hash(url) if sha256 is None else sha256
    timeout = _timeout() if timeout is None else timeout
    if not isinstance(sha256, str) or len(sha256) != 64:
        raise InvalidArgumentError(f"sha256={sha256!r} must be a 64-digit hex string")
    sha256 = sha256.lower()
    cache = cache_folder(cache_dir)
    dest = cache / (filename or url.rstrip("/").split("/")[-1])
    if file_state(dest, sha256)[0] == OK:
        return str(dest)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"cannot create the cache folder {cache}: {e.strerror or e}; set $SHAP_E_CACHE "
                            "or cache_dir= to a writable folder") from None
    lock = Path(f"{dest}.lock")
    try:
        with FileLock(str(lock)):  # one download per file at a time, across processes
            _fetch_locked(url, dest, sha256, progress, redownload, timeout, chunk_size)
    finally:
        lock.unlink(missing_ok=True)  # a waiting process that already opened it still downloads safely
    return str(dest)


def _timeout() -> float:
    text = os.environ.get("SHAP_E_DOWNLOAD_TIMEOUT", "30")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise InvalidArgumentError(f"$SHAP_E_DOWNLOAD_TIMEOUT={text!r} must be a positive number of seconds")
    return value


def _fetch_locked(url, dest: Path, sha256: str, progress, redownload, timeout, chunk_size) -> None:
    state, actual = file_state(dest, sha256)
    if state == OK:
        return
    if state == CORRUPT:
        if not redownload:
            name = _model_for_url(url)
            fix = f"run `shap-e download {name} --redownload`" if name else "pass redownload=True to replace it"
            raise ChecksumError(dest, sha256, actual, f"It is partial or corrupt: delete it, or {fix}.")
        dest.unlink()
    _download(url, dest, sha256, progress, timeout, chunk_size)


def _read_yaml(path: PathLike) -> Dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def load_config(
    config_name: str,
    progress: bool = False,
    cache_dir: Optional[PathLike] = None,
    chunk_size: int = 4096,
    *,
    official: bool = False,
) -> Dict[str, Any]:
    """The config dict of a registered model.

    :param config_name: a registry name (`transmitter`, `decoder`, `text300M`, `image300M`,
        `diffusion`, `diffusion-small`, ...). `"diffusion"` is the official models' schedule; the
        small priors are trained with `"diffusion-small"` (their registry entry's `diffusion`), and
        `sample_latents` refuses a diffusion that does not match the model it is given.
    :param official: download the official YAML (checked against its sha256) instead of reading the
        copy shipped in `shap_e/configs/`.
    """
    spec = get_spec(config_name)
    if not official:
        return _read_yaml(config_path(spec))
    if spec.config_url is None or spec.config_sha256 is None:
        raise InvalidArgumentError(f"model {config_name!r} has no official config to download; use official=False")
    return _read_yaml(fetch_file_cached(spec.config_url, progress, cache_dir, chunk_size, sha256=spec.config_sha256))


def load_state_dict_file(path: PathLike, device: Union[str, torch.device] = "cpu") -> Dict[str, torch.Tensor]:
    """Read a flat `{name: tensor}` checkpoint from `.safetensors` or a torch file, never unpickling code."""
    state = read_tensor_file(path, "checkpoint", device)
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CorruptFileError(f"checkpoint {path} must hold a flat dict of tensors (a state_dict)")
    return dict(state)


def load_checkpoint(
    checkpoint_name: str,
    device: Union[str, torch.device, None] = None,
    progress: bool = True,
    cache_dir: Optional[PathLike] = None,
    chunk_size: int = 4096,
) -> Dict[str, torch.Tensor]:
    """Download (if needed) and read the weights of a registered model (`device` None: the CPU)."""
    spec = get_spec(checkpoint_name)
    if not spec.has_weights:
        raise InvalidArgumentError(
            f"model {checkpoint_name!r} is config-only ({spec.description}); it has no weights to load"
        )
    dev = _device(device)
    if spec.bundled_weights is not None:
        return load_state_dict_file(verified_bundled_weights(spec), dev)
    return load_state_dict_file(fetch_file_cached(spec.url, progress, cache_dir, chunk_size, sha256=spec.sha256), dev)


def verified_bundled_weights(spec: ModelSpec) -> Path:
    """The path of a model's package-bundled weights after a sha256 check."""
    path = spec.bundled_weights
    if not path.is_file():
        raise CorruptFileError(f"the bundled weights of {spec.name!r} are missing ({path}); reinstall the package")
    actual = hash_file(path)
    if actual != spec.sha256:
        raise ChecksumError(str(path), spec.sha256, actual, "The installed package is damaged; reinstall it.")
    return path


def _device(device: Union[str, torch.device, None]) -> torch.device:
    """A validated, available torch.device (`None` means cpu)."""
    from shap_e.util.config import resolve_device

    return resolve_device(device) or torch.device("cpu")


def _first(keys, n: int = 5) -> str:
    keys = list(keys)
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more


def load_state_dict_strict(
    model: nn.Module, state: Mapping[str, torch.Tensor], source: str, *, assign: bool = False
) -> None:
    """`model.load_state_dict(state, strict=True)` with an error listing the first bad keys.

    :param assign: make `state`'s tensors the model's own (cast to each entry's dtype and device)
        instead of copying them into the built ones: one copy of the weights in memory, not two
        (`shap_e.models.weights_io.assign_state`).
    """
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
        raise CorruptFileError(
            f"weights from {source} do not fit {type(model).__name__}: " + "; ".join(problems)
            + ". Check that the config matches the checkpoint."
        )
    if assign:
        assign_state(model, state)
    else:
        model.load_state_dict(state, strict=True)


def load_model(
    model_name: str,
    device: Union[str, torch.device, None] = None,
    *,
    cache_dir: Optional[PathLike] = None,
    progress: bool = True,
    weights_path: Optional[PathLike] = None,
    config: Optional[Union[Mapping[str, Any], PathLike]] = None,
    precision: Optional[str] = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a registered model from its config and load its weights strictly; returns it in eval mode.

    The checkpoint is memory-mapped and its tensors become the model's own, so the weights are in
    memory once (`shap_e.models.weights_io`).

    :param model_name: a registry name with weights (`transmitter`, `decoder`, `text300M`,
        `image300M`, `transmitter-small`, `text-small`, `image-small`, or one added with `register_model`).
    :param device: `None` (cpu), `'cpu'`, `'cuda'`, `'cuda:0'`, `'mps'` or a `torch.device`.
    :param cache_dir: download cache (default `$SHAP_E_CACHE`, else `~/.cache/shap_e`).
    :param weights_path: a local `.pt`/`.safetensors` state_dict to use instead of downloading.
    :param config: a config dict or YAML path to use instead of the registered one.
    :param precision: `None`/`"float32"`, or `"int8"` (CPU only; a prior's transformer linears in int8,
        approximate: `shap_e.models.quantize`).
    :param kwargs: passed on to `load_checkpoint` (`chunk_size`), as the official `load_model` does.

    The model records its registry entry as `model.registry_spec` (`decode_latent_images` reads its
    `render_modes`) and, for a prior, the diffusion config it was trained with as
    `model.diffusion_config` / `model.diffusion_name` (`sample_latents` checks the diffusion it is given).
    """
    from shap_e.models.configs import model_from_config
    from shap_e.models.quantize import apply_precision, check_precision
    from shap_e.util.config import skip_weight_init

    unknown = sorted(set(kwargs) - {"chunk_size"})
    if unknown:
        raise InvalidArgumentError(f"load_model got unknown keyword argument(s) {unknown}; valid: cache_dir, "
                                   "progress, weights_path, config, precision, chunk_size")
    dev = _device(device)
    check_precision(precision, dev)
    spec: ModelSpec = get_spec(model_name)
    if not spec.has_weights and weights_path is None:
        raise InvalidArgumentError(
            f"model {model_name!r} is config-only ({spec.description}); use load_config({model_name!r}) "
            "and build the diffusion from that config"
        )
    cfg = config if config is not None else load_config(model_name)
    if weights_path is not None:
        state, source = load_state_dict_file(weights_path, dev), str(weights_path)
    else:
        state = load_checkpoint(model_name, dev, progress, cache_dir, **kwargs)
        source = spec.url or spec.weights_file
    with skip_weight_init():  # every persistent tensor is overwritten by the strict load below
        model = model_from_config(cfg, device=dev)
    load_state_dict_strict(model, state, source, assign=True)
    _record_origin(model, spec)
    return apply_precision(model.eval(), precision)


def _record_origin(model: nn.Module, spec: ModelSpec) -> None:
    model.registry_spec = spec
    if (spec.kind in ("text", "image") or spec.decoders) and spec.diffusion in registry.MODELS:
        model.diffusion_name = spec.diffusion
        model.diffusion_config = load_config(spec.diffusion)
