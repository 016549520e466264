"""Refusing work that cannot fit in memory, before it starts."""
import pytest

from shap_e.util.errors import ResourceLimitError
from shap_e.util.memory import available_memory, check_fits, format_bytes


def test_the_cpu_reports_free_memory():
    free = available_memory("cpu")
    assert free is None or free > 0


def test_check_fits_refuses_more_than_is_free_and_says_what_fits():
    free = available_memory()
    if free is None:
        pytest.skip("this platform does not report free memory")
    check_fits(1e6, "a small request", "unused")
    with pytest.raises(ResourceLimitError, match=r"^--grid-size 99 needs about 1\.0 PB|needs about .* of memory but only"):
        check_fits(free * 1000, "--grid-size 99", lambda left: f"use at most {format_bytes(left)}")


def test_format_bytes():
    assert [format_bytes(n) for n in (512e3, 3.2e9, 40e12)] == ["512 kB", "3.2 GB", "40 TB"]
