"""Devices: a device this computer lacks is named with the ones it has."""
import pytest
import torch

from shap_e.util.config import available_devices, resolve_device
from shap_e.util.errors import DeviceUnavailableError, InvalidArgumentError


def test_the_cpu_is_always_available():
    assert available_devices()[0] == "cpu" and resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this computer has CUDA")
def test_missing_cuda_is_named_with_what_is_available():
    with pytest.raises(DeviceUnavailableError, match=r"device 'cuda' is not available on this computer; available: cpu"):
        resolve_device("cuda")


def test_a_cuda_index_beyond_the_devices_is_refused():
    with pytest.raises(DeviceUnavailableError, match="'cuda:99' is not available"):
        resolve_device("cuda:99")


@pytest.mark.skipif("mps" in available_devices(), reason="this computer has MPS")
def test_missing_mps_is_named():
    with pytest.raises(DeviceUnavailableError, match="device 'mps' is not available"):
        resolve_device("mps")


def test_a_malformed_device_is_an_invalid_argument():
    with pytest.raises(InvalidArgumentError, match="device='cdua' is not a valid device"):
        resolve_device("cdua")
