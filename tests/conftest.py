"""Shared test setup: one torch thread (2 shared cores are 10-30x slower with 2) and golden data."""
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

GOLDEN_DIR = Path(__file__).parent / "golden"


def load_golden(name: str) -> dict:
    """Load a golden file (produced by the official implementation) by its letter prefix, e.g. 'a'."""
    matches = sorted(GOLDEN_DIR.glob(f"{name}_*.pt"))
    if not matches:
        raise FileNotFoundError(f"no golden file {name}_*.pt in {GOLDEN_DIR}")
    return torch.load(matches[0], weights_only=True)


@pytest.fixture(scope="session")
def golden():
    cache = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = load_golden(name)
        return cache[name]

    return get
