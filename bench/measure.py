"""Timing, memory and machine facts for the benchmark (one process = one stage).

Peak RSS comes from `/proc/self/status` (`VmHWM`), which is per process and only grows; the
harness therefore runs every stage in a fresh subprocess, and resets the mark after setup
(`/proc/self/clear_refs`, value 5) so that the peak of the timed runs can be told apart from
the peak of building the model.
"""
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from shap_e.util.machine import cpu_model_and_flags

MATMUL_SIZE = 2048


@dataclass
class Timing:
    """Seconds of the timed runs (after the warm-up runs): wall clock, and this process's CPU time.

    With one thread, CPU time close to wall time means the run had a core to itself; on a shared
    machine wall/CPU > 1 measures the contention.
    """

    median_s: float
    min_s: float
    runs_s: List[float]
    cpu_runs_s: List[float]
    warmup: int

    @property
    def cpu_median_s(self) -> float:
        return statistics.median(self.cpu_runs_s)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that wall-clock times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], Any], repeats: int, warmup: int, device: Optional[torch.device] = None):
    """Run `fn` `warmup` times untimed, then `repeats` times timed.

    :return: `(Timing, last output of fn)`.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    device = device or torch.device("cpu")
    out = None
    for _ in range(warmup):
        out = fn()
    synchronize(device)
    runs, cpu_runs = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        out = fn()
        synchronize(device)
        runs.append(time.perf_counter() - start)
        cpu_runs.append(time.process_time() - cpu_start)
    return Timing(statistics.median(runs), min(runs), runs, cpu_runs, warmup), out


def proc_status_mb(key: str) -> Optional[float]:
    """A `kB` field of `/proc/self/status` (`VmHWM`, `VmRSS`) in MiB; None where there is no procfs."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset this process's `VmHWM` to its current RSS (Linux >= 4.0); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cpu_flags() -> Dict[str, Any]:
    """CPU model and the flags that decide the bf16 path (`avx512_bf16`, `amx_bf16`)."""
    model, flags = cpu_model_and_flags()
    mkldnn_bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
        "mkldnn_bf16_supported": bool(mkldnn_bf16()) if mkldnn_bf16 is not None else None,
    }


def system_info(device: torch.device) -> Dict[str, Any]:
    """Versions, CPU facts, load average and (on GPU) the device name."""
    info: Dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        **cpu_flags(),
    }
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        info["loadavg"] = None
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def matmul_gflops(dtype: torch.dtype, device: torch.device, repeats: int = 5, size: int = MATMUL_SIZE) -> float:
    """Best achieved GFLOP/s of a `size`^3 matmul (2 size^3 FLOPs) in `dtype`: the machine's peak."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    with torch.inference_mode():
        timing, _ = measure(lambda: a @ b, repeats=repeats, warmup=1, device=device)
    return 2.0 * size**3 / timing.min_s / 1e9
