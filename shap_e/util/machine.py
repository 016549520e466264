"""Facts about the CPU a process runs on (for run logs and benchmark reports)."""
import platform
from typing import FrozenSet, Tuple


def cpu_model_and_flags(cpuinfo: str = "/proc/cpuinfo") -> Tuple[str, FrozenSet[str]]:
    """The CPU's model name and feature flags, from the first processor listed in `cpuinfo` where
    that file can be read (else `platform.processor()`, or "unknown", and no flags)."""
    model, flags = "", frozenset()
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model or platform.processor() or "unknown", flags
