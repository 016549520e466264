"""The weights cache: where files live, and whether a cached file is complete and correct.

A cached file counts as present only after its size and sha256 were checked. Hashing a 1.3 GB
checkpoint takes seconds, so a successful check is remembered in a small record beside the file
(`.NAME.verified`: size, inode, modification and change times, sha256); while these are unchanged
the record stands, and any change makes the next look hash the file again.
"""
import hashlib
import json
import os
from pathlib import Path
from typing import Optional, Tuple, Union

from shap_e.models import registry
from shap_e.models.registry import ModelSpec, get_spec

__all__ = [
    "CORRUPT", "MISSING", "OK", "cache_state", "cached_file", "default_cache_dir", "file_state", "hash_file",
    "record_verified", "weights_cached", "available_model",
]

PathLike = Union[str, os.PathLike]
_CHUNK = 1 << 20
OK, MISSING, CORRUPT = "ok", "missing", "corrupt"


def default_cache_dir() -> Path:
    """`$SHAP_E_CACHE` if set, else `~/.cache/shap_e` (read on every call, so tests can move it)."""
    env = os.environ.get("SHAP_E_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "shap_e"


def cache_folder(cache_dir: Optional[PathLike]) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def hash_file(path: PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def record_verified(path: PathLike, sha256: str) -> None:
    """Remember that `path`, as it is now, hashes to `sha256` (best effort: a read-only cache is fine)."""
    path = Path(path)
    try:
        _record_path(path).write_text(json.dumps({**_identity(path), "sha256": sha256}))
    except OSError:
        pass


def _identity(path: Path) -> dict:
    stat = path.stat()
    return {"size": stat.st_size, "inode": stat.st_ino, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns}


def _recorded(path: Path, sha256: str) -> bool:
    try:
        record = json.loads(_record_path(path).read_text())
        identity = _identity(path)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record == {**identity, "sha256": sha256}


def file_state(path: PathLike, sha256: str, remember: bool = True) -> Tuple[str, Optional[str]]:
    """(`OK`, sha256) for a complete and correct file, (`MISSING`, None), or (`CORRUPT`, its actual sha256).

    `remember`: record a successful check beside the file (not for files inside the package).
    """
    path = Path(path)
    if not path.is_file():
        return MISSING, None
    if _recorded(path, sha256):
        return OK, sha256
    try:
        actual = hash_file(path)
    except OSError:
        return CORRUPT, "unreadable"
    if actual != sha256:
        return CORRUPT, actual
    if remember:
        record_verified(path, sha256)
    return OK, actual


def cached_file(spec: ModelSpec, cache_dir: Optional[PathLike] = None) -> Path:
    """Where the cache keeps the weights of a downloadable model (the URL's last path segment)."""
    return cache_folder(cache_dir) / spec.url.rstrip("/").split("/")[-1]


def cache_state(name: str, cache_dir: Optional[PathLike] = None) -> str:
    """`ok`, `missing` or `corrupt` for a model's cached weights; `bundled` for weights that ship with
    the package (`corrupt` when damaged), `-` for a config-only entry."""
    spec = get_spec(name)
    if not spec.has_weights:
        return "-"
    if spec.bundled_weights is not None:
        state, _ = file_state(spec.bundled_weights, spec.sha256, remember=False)
        return "bundled" if state == OK else state
    return file_state(cached_file(spec, cache_dir), spec.sha256)[0]


def weights_cached(name: str, cache_dir: Optional[PathLike] = None) -> bool:
    """Whether a registered model's weights are here, complete and correct (no network)."""
    return cache_state(name, cache_dir) in (OK, "bundled")


def available_model(preferred: str, fallback: Optional[str] = None, cache_dir: Optional[PathLike] = None) -> str:
    """`preferred` when its weights are cached, else a registered `fallback`, else `preferred`.

    Never touches the network: notebooks and the CLI use it to run offline on a bundled model
    when the official weights have not been downloaded (or the cached copy is damaged).
    """
    if weights_cached(preferred, cache_dir) or fallback is None or fallback not in registry.MODELS:
        return preferred
    return fallback
