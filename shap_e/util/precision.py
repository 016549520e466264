"""Which float type to compute in: bfloat16 where the hardware runs it natively, else float32."""
import functools
from typing import Optional, Union

import torch

__all__ = ["AUTO_BF16_MIN_WIDTH", "native_bf16", "resolve_query_dtype"]

# Below this MLP width bf16 does not pay off on CPU (casts and small GEMMs dominate): the small
# bundled models (width 32) stay float32; the release decoder (width 256) is ~1.9x faster in bf16.
AUTO_BF16_MIN_WIDTH = 128
_NATIVE_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def native_bf16(device: Union[str, torch.device]) -> bool:
    """Whether `device` multiplies bfloat16 matrices natively: a CUDA GPU with bf16, or a CPU with
    AVX512-BF16 or AMX (read from /proc/cpuinfo; False where that cannot be read)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(_cpu_flags() & _NATIVE_CPU_FLAGS)
    return False


def resolve_query_dtype(
    query_dtype: Union[None, str, torch.dtype], device: Union[str, torch.device], width: int
) -> Optional[torch.dtype]:
    """The dtype to autocast field queries to (None: float32).

    query_dtype: None (float32), a float dtype (used as given), or "auto": bfloat16 when
    `native_bf16(device)` and the MLP is at least `AUTO_BF16_MIN_WIDTH` wide, else float32.
    """
    if query_dtype is None or isinstance(query_dtype, torch.dtype):
        return query_dtype
    if query_dtype != "auto":
        raise ValueError(f"query_dtype must be None, a torch dtype or 'auto', got {query_dtype!r}")
    return torch.bfloat16 if width >= AUTO_BF16_MIN_WIDTH and native_bf16(device) else None
