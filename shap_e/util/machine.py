"""Facts about the CPU a process runs on (for run logs and benchmark reports)."""
import platform
from typing import FrozenSet, Tuple


def cpu_model_and_flags() -> Tuple[str, FrozenSet[str]]:
    """The CPU's model name and feature flags, from /proc/cpuinfo where there is one (else
    `platform.processor()` and no flags)."""
    model, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model or platform.processor() or "unknown", flags
