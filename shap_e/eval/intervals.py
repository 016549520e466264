"""Confidence intervals of the evaluation's numbers, as pure functions.

* A proportion (an accuracy: k right out of n) gets the Wilson score interval, which stays inside
  [0, 1] and keeps its coverage near 0 % and 100 %, where the normal approximation does not.
* A mean of a continuous per-item value (IoU, Chamfer distance, a classifier score) gets a percentile
  bootstrap interval: the items are resampled with replacement `n_resamples` times from a seeded
  generator, and the interval is the central `confidence` share of the resampled means, so the same
  values and seed always give the same interval.
"""
from statistics import NormalDist
from typing import Sequence, Tuple

import numpy as np

__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CONFIDENCE", "bootstrap_mean_interval", "wilson_interval"]

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
_CHUNK = 1000  # resamples drawn at a time: bounds memory at 1000 * n indices


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> Tuple[float, float]:
    """The Wilson score interval `(low, high)` of a proportion `successes / n`.

    With z the two-sided normal quantile of `confidence` and p = successes / n:
    centre = (p + z^2 / 2n) / (1 + z^2 / n), half-width = z / (1 + z^2 / n) * sqrt(p (1 - p) / n + z^2 / 4n^2).
    """
    _check_confidence(confidence)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n] = [0, {n}], got {successes}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p, z2 = successes / n, z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * (p * (1 - p) / n + z2 / (4 * n * n)) ** 0.5
    # The bounds are exact at 0 and n; rounding must not push them past the observed proportion.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def bootstrap_mean_interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Tuple[float, float]:
    """The percentile bootstrap interval `(low, high)` of the mean of `values` (deterministic per `seed`)."""
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    sample = np.asarray(values, dtype=np.float64)
    if sample.ndim != 1 or len(sample) == 0:
        raise ValueError(f"values must be a non-empty sequence of numbers, got shape {sample.shape}")
    if not np.isfinite(sample).all():
        raise ValueError("values must be finite numbers")
    rng = np.random.default_rng(seed)
    means = np.concatenate([
        sample[rng.integers(0, len(sample), size=(min(_CHUNK, n_resamples - start), len(sample)))].mean(axis=1)
        for start in range(0, n_resamples, _CHUNK)
    ])
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)
