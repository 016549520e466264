"""How much memory a device has free, and refusing work that cannot fit before it starts.

Callers estimate what a request needs (`models.decode.mesh_memory_bytes`, ...) and call
`check_fits`; a request that would exhaust memory is refused with a one-line
`ResourceLimitError` naming the limit, instead of growing until the machine swaps or kills it.
"""
import os
from pathlib import Path
from typing import Callable, Optional, Union

from shap_e.util.errors import ResourceLimitError

__all__ = ["available_memory", "check_disk_space", "check_fits", "format_bytes"]

_CGROUP = Path("/sys/fs/cgroup")


def format_bytes(n: float) -> str:
    """`n` bytes as a short human string: `512 MB`, `3.2 GB`, `40 TB`."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}" if n < 10 * size else f"{n / size:.0f} {unit}"
    return f"{n / 1e3:.0f} kB"


def _read_int(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _system_available() -> Optional[int]:
    """Free RAM of the machine (Linux `MemAvailable`, else the OS's free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available() -> Optional[int]:
    """What a cgroup-v2 memory limit (a container's) still allows, if one is set."""
    limit, used = _read_int(_CGROUP / "memory.max"), _read_int(_CGROUP / "memory.current")
    if limit is None or used is None:
        return None
    return max(0, limit - used)


def available_memory(device: Union[str, "object", None] = None) -> Optional[int]:
    """Bytes free for new work on `device` (None or cpu: RAM; cuda: the GPU's free memory); None
    when it cannot be told."""
    kind = getattr(device, "type", None) or (str(device).split(":")[0] if device is not None else "cpu")
    if kind == "cuda":
        import torch

        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    if kind != "cpu":
        return None
    values = [v for v in (_system_available(), _cgroup_available()) if v is not None]
    return min(values) if values else None


def check_fits(needed: float, what: str, advice: Union[str, Callable[[int], str]], device=None) -> None:
    """Raise ResourceLimitError when `what` (e.g. "--grid-size 2048") needs more than the free memory.

    `advice` says what would fit (e.g. "use --grid-size 512 or less"), or is a function of the free
    bytes that says so.
    """
    free = available_memory(device)
    if free is not None and needed > free:
        hint = advice(free) if callable(advice) else advice
        raise ResourceLimitError(
            f"{what} needs about {format_bytes(needed)} of memory but only {format_bytes(free)} is free; {hint}"
        )


def check_disk_space(folder, needed: float, what: str, advice: str) -> None:
    """Raise ResourceLimitError when the disk holding `folder` (or its nearest existing parent) has
    less than `needed` bytes free."""
    import shutil

    existing = Path(folder).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    if needed > free:
        raise ResourceLimitError(
            f"{what} needs about {format_bytes(needed)} of disk but only {format_bytes(free)} is free; {advice}"
        )
