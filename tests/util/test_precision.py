"""Choosing bf16 only where it is native and pays off (`shap_e.util.precision`)."""
import pytest
import torch

from shap_e.util import precision


@pytest.fixture
def cpu_flags(monkeypatch):
    def set_flags(*flags):
        monkeypatch.setattr(precision, "_cpu_flags", lambda: frozenset(flags))

    return set_flags


def test_auto_is_bf16_only_on_a_native_bf16_cpu_for_a_wide_mlp(cpu_flags):
    cpu_flags("avx512f", "avx512_bf16")
    assert precision.resolve_query_dtype("auto", "cpu", 256) == torch.bfloat16
    assert precision.resolve_query_dtype("auto", "cpu", 32) is None  # the small models stay float32
    cpu_flags("amx_bf16")
    assert precision.resolve_query_dtype("auto", "cpu", 128) == torch.bfloat16
    cpu_flags("avx512f", "avx2")  # AVX-512 without BF16 would emulate it: slower than float32
    assert precision.resolve_query_dtype("auto", "cpu", 256) is None
    assert not precision.native_bf16("meta")


def test_explicit_choices_pass_through_and_bad_ones_are_named(cpu_flags):
    cpu_flags("avx512_bf16")
    assert precision.resolve_query_dtype(None, "cpu", 256) is None
    assert precision.resolve_query_dtype(torch.float16, "cpu", 32) == torch.float16
    with pytest.raises(ValueError, match="query_dtype must be None, a torch dtype or 'auto', got 'bf16'"):
        precision.resolve_query_dtype("bf16", "cpu", 256)


def test_cpu_flags_are_read_from_cpuinfo_when_there_is_one():
    flags = precision._cpu_flags()
    assert isinstance(flags, frozenset)
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        assert flags == frozenset()
        return
    if "flags" in text:
        assert "fpu" in flags or len(flags) > 0
