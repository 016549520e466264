"""Small tensor helpers: conversion, safe division, sampling from a pmf."""
import numpy as np
import torch

from shap_e.models.nn.utils import safe_divide, sample_pmf, to_torch


def test_to_torch_converts_arrays_and_keeps_tensors():
    t = torch.ones(2)
    assert to_torch(t) is t
    assert to_torch([1, 2, 3]).dtype == torch.float32
    assert torch.equal(to_torch(np.array([1.5]), dtype=torch.float64), torch.tensor([1.5], dtype=torch.float64))


def test_safe_divide_moves_the_divisor_away_from_zero_keeping_its_sign():
    out = safe_divide(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.0, -0.0, -2.0]), epsilon=0.5)
    assert torch.equal(out, torch.tensor([2.0, 2.0, -0.4]))  # -0.0 is not negative: pushed up
    assert safe_divide(torch.tensor([1.0]), torch.tensor([-1e-9])).item() < -1e5


def test_sample_pmf_draws_indices_with_the_given_frequencies():
    pmf = torch.tensor([0.1, 0.0, 0.6, 0.3]).view(1, 4, 1).expand(2, 4, 1)
    torch.manual_seed(0)
    idx = sample_pmf(pmf, 20000)
    assert idx.shape == (2, 20000, 1)
    freq = torch.bincount(idx.flatten(), minlength=4).float() / idx.numel()
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.01, rtol=0)
    # One torch.rand([rows, n]) draw: the global RNG and a generator give the same indices.
    torch.manual_seed(3)
    a = sample_pmf(pmf, 5)
    assert torch.equal(a, sample_pmf(pmf, 5, generator=torch.Generator().manual_seed(3)))
