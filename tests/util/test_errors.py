"""The error family: one-line messages, and the base classes older callers catch."""
import pytest

from shap_e.util.checks import check_finite, check_int, check_number, shorten
from shap_e.util.errors import (
    ChecksumError,
    CorruptFileError,
    DownloadError,
    InvalidArgumentError,
    NonFiniteError,
    ShapEError,
)


def test_every_message_is_one_line():
    error = ShapEError("first line\n  second\tline\n")
    assert str(error) == "first line second line"


def test_download_and_checksum_errors_stay_runtime_errors_and_are_shap_e_errors():
    assert issubclass(DownloadError, RuntimeError) and issubclass(DownloadError, ShapEError)
    assert issubclass(ChecksumError, RuntimeError) and issubclass(ChecksumError, CorruptFileError)
    error = ChecksumError("/c/w.pt", "a" * 64, "b" * 64, "Delete it.")
    assert (error.expected, error.actual) == ("a" * 64, "b" * 64) and str(error).endswith("Delete it.")
    assert issubclass(ShapEError, ValueError)  # code catching ValueError for bad arguments keeps working


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "3", None, True])
def test_check_number_refuses_what_is_not_a_finite_real(value):
    with pytest.raises(InvalidArgumentError, match=r"^guidance_scale must be a finite number in \[-10, 10\], got"):
        check_number(value, "guidance_scale", -10, 10)


def test_check_number_bounds_and_open_ends():
    assert check_number(3, "x", 0, 5) == 3.0
    with pytest.raises(InvalidArgumentError, match=r"x must be a finite number > 0, got 0"):
        check_number(0.0, "x", 0, None, low_open=True)
    with pytest.raises(InvalidArgumentError, match=r"got 6"):
        check_number(6, "x", 0, 5)


def test_check_int_names_the_range_in_integers():
    assert check_int(7, "--seed", 0, 2**63 - 1) == 7
    with pytest.raises(InvalidArgumentError, match=r"--seed must be an integer in \[0, 9223372036854775807\], got 10{20}"):
        check_int(10**20, "--seed", 0, 2**63 - 1)
    with pytest.raises(InvalidArgumentError, match="got 2.5"):
        check_int(2.5, "steps", 2)


def test_check_finite_counts_the_bad_entries_and_names_the_stage():
    import torch

    check_finite(torch.ones(3), "x", "fine")
    with pytest.raises(NonFiniteError, match=r"the sampled latents holds 2 NaN or infinite values of 4; lower") as info:
        check_finite(torch.tensor([1.0, float("nan"), float("inf"), 0.0]), "the sampled latents", "lower it")
    assert info.value.stage == "the sampled latents"


def test_shorten_cuts_long_user_input():
    assert shorten("short") == "short"
    assert shorten("word " * 400) == ("word " * 400)[:57] + "..."
