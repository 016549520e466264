"""shap_e.util.machine reads the CPU's model name and flags from a cpuinfo file."""
import platform

from shap_e.util.machine import cpu_model_and_flags

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2 avx2 fma
bugs\t\t: sysret_ss_attrs

processor\t: 1
model name\t: Some Other CPU
flags\t\t: fpu avx512f
"""


def test_the_first_processors_model_and_flags_are_read(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    model, flags = cpu_model_and_flags(str(path))
    assert model == "AMD EPYC 7B13 64-Core Processor"
    assert flags == frozenset({"fpu", "sse2", "avx2", "fma"})


def test_an_unreadable_cpuinfo_falls_back_to_the_platform_and_no_flags(tmp_path):
    model, flags = cpu_model_and_flags(str(tmp_path / "missing"))
    assert model == (platform.processor() or "unknown")
    assert flags == frozenset()
