"""Wilson and bootstrap intervals against values worked out by hand and against their defining properties."""
import numpy as np
import pytest

from shap_e.eval.intervals import bootstrap_mean_interval, wilson_interval


def test_wilson_interval_of_85_out_of_100_matches_the_hand_computation():
    # p = 0.85, z = 1.959964, z^2 / n = 0.0384146:
    # centre = (0.85 + 0.0192073) / 1.0384146 = 0.837052
    # half   = 1.959964 / 1.0384146 * sqrt(0.85 * 0.15 / 100 + 3.841459 / 40000) = 1.887457 * 0.0370275 = 0.069888
    low, high = wilson_interval(85, 100)
    assert low == pytest.approx(0.767164, abs=1e-6) and high == pytest.approx(0.906940, abs=1e-6)


def test_wilson_interval_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for k, n in ((0, 20), (20, 20), (7, 48), (41, 48), (904, 1104), (1, 1)):
        expected = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert wilson_interval(k, n) == pytest.approx((expected.low, expected.high), abs=1e-12)
    expected = stats.binomtest(30, 40).proportion_ci(confidence_level=0.9, method="wilson")
    assert wilson_interval(30, 40, confidence=0.9) == pytest.approx((expected.low, expected.high), abs=1e-12)


def test_wilson_interval_is_exact_at_the_ends_and_narrows_with_n():
    assert wilson_interval(0, 48)[0] == 0.0 and wilson_interval(48, 48)[1] == 1.0
    widths = [np.diff(wilson_interval(3 * n // 4, n))[0] for n in (48, 288, 1104)]
    assert widths[0] > widths[1] > widths[2]
    # The test set's size: any proportion of 1104 items is known within +-3 points.
    assert all(np.diff(wilson_interval(k, 1104))[0] / 2 <= 0.03 for k in range(0, 1105, 8))


@pytest.mark.parametrize("k, n, confidence, message", [
    (1, 0, 0.95, "n must be at least 1"), (5, 4, 0.95, r"successes must be in \[0, n\]"),
    (-1, 4, 0.95, "successes"), (2, 4, 1.0, r"confidence must be in \(0, 1\)"),
])
def test_wilson_interval_rejects_impossible_counts(k, n, confidence, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(k, n, confidence)


def test_bootstrap_interval_is_deterministic_per_seed_and_covers_the_mean():
    values = np.random.default_rng(3).uniform(0.3, 1.0, size=200)
    first = bootstrap_mean_interval(values, seed=5)
    assert bootstrap_mean_interval(list(values), seed=5) == first
    assert bootstrap_mean_interval(values, seed=6) != first
    low, high = first
    assert low < values.mean() < high
    # The bootstrap standard error of a mean is close to s / sqrt(n); the 95 % interval spans about 3.92 of it.
    assert (high - low) == pytest.approx(3.92 * values.std(ddof=1) / np.sqrt(len(values)), rel=0.1)


def test_bootstrap_interval_of_a_constant_sample_is_that_constant():
    assert bootstrap_mean_interval([0.7] * 30) == pytest.approx((0.7, 0.7))
    assert bootstrap_mean_interval([0.25]) == pytest.approx((0.25, 0.25))


def test_bootstrap_interval_is_the_documented_percentile_bootstrap():
    values = np.linspace(0, 1, 50)
    low, high = bootstrap_mean_interval(values, n_resamples=2500, seed=1)
    rng = np.random.default_rng(1)
    means = np.concatenate([values[rng.integers(0, 50, size=(k, 50))].mean(axis=1) for k in (1000, 1000, 500)])
    assert (low, high) == tuple(np.quantile(means, [0.025, 0.975]))


@pytest.mark.parametrize("values, kwargs, message", [
    ([], {}, "non-empty"), ([0.5, float("nan")], {}, "finite"), ([0.5], {"n_resamples": 0}, "n_resamples"),
    ([0.5], {"confidence": 0.0}, "confidence"),
])
def test_bootstrap_interval_rejects_bad_input(values, kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_mean_interval(values, **kwargs)
