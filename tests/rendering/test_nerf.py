"""NeRF sampling and integration (docs/behaviour.md#nerf-rendering): analytic cases, sampler properties, RNG order."""
import math

import torch

from shap_e.rendering.fields import NeRSTFOutput
from shap_e.rendering.nerf import (
    importance_samples,
    integrate_samples,
    partition,
    render_rays,
    stratified_samples,
)
from shap_e.rendering.volume import BoundingBox, RayRange

BOX = BoundingBox(torch.full((3,), -1.0), torch.full((3,), 1.0))


def _range(t0, t1):
    t0 = torch.tensor(t0, dtype=torch.float32).view(1, -1, 1)
    t1 = torch.tensor(t1, dtype=torch.float32).view(1, -1, 1)
    return RayRange(t0, t1, t0 < t1)


def test_stratified_samples_fall_one_per_stratum_inside_the_range():
    rr = _range([1.0, 3.0], [2.0, 7.0])
    ts = stratified_samples(rr, 8, torch.Generator().manual_seed(0))
    assert ts.shape == (1, 2, 8, 1)
    for ray, (t0, t1) in enumerate([(1.0, 2.0), (3.0, 7.0)]):
        edges = torch.linspace(t0, t1, 8)
        lower = torch.cat([torch.tensor([t0]), (edges[1:] + edges[:-1]) / 2])
        upper = torch.cat([(edges[1:] + edges[:-1]) / 2, torch.tensor([t1])])
        t = ts[0, ray, :, 0]
        assert ((t >= lower - 1e-6) & (t <= upper + 1e-6)).all()


def test_integration_of_a_constant_medium_matches_beer_lambert():
    rr = _range([2.0], [4.0])
    ts = torch.linspace(2.0, 4.0, 65)[1:-1].view(1, 1, -1, 1)
    sigma, color = 0.7, torch.tensor([0.2, 0.5, 0.9])
    density = torch.full_like(ts, sigma)
    channels = color.expand(1, 1, ts.shape[2], 3)
    out = integrate_samples(rr, ts, density, channels)
    expected_t = math.exp(-sigma * 2.0)
    torch.testing.assert_close(out.transmittance, torch.tensor([[[expected_t]]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.weights.sum(dim=-2), 1 - out.transmittance, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.channels, (color * (1 - expected_t)).view(1, 1, 3), atol=1e-5, rtol=0)
    # distances = integral of t * sigma * exp(-sigma (t - 2)) over [2, 4] (weights are not normalised).
    depth = (1 - expected_t) * (2 + 1 / sigma) - 2 * expected_t
    torch.testing.assert_close(out.distances, torch.tensor([[[depth]]]), atol=2e-3, rtol=0)


def test_partition_edges_are_range_ends_and_midpoints():
    rr = _range([1.0], [3.0])
    ts = torch.tensor([1.5, 2.0, 2.9]).view(1, 1, 3, 1)
    lower, upper, delta = partition(rr, ts)
    torch.testing.assert_close(lower.flatten(), torch.tensor([1.0, 1.75, 2.45]))
    torch.testing.assert_close(upper.flatten(), torch.tensor([1.75, 2.45, 3.0]))
    torch.testing.assert_close(delta.sum(), torch.tensor(2.0))


def test_importance_samples_concentrate_where_the_weights_are_and_are_sorted():
    rr = _range([0.0], [1.0])
    ts = ((torch.arange(16) + 0.5) / 16).view(1, 1, 16, 1)
    weights = torch.zeros(1, 1, 16, 1)
    weights[0, 0, 10] = 1.0
    fine = importance_samples(rr, ts, weights, 256, torch.Generator().manual_seed(1))
    lower, upper, _ = partition(rr, ts)
    inside = (fine >= lower[0, 0, 10]) & (fine <= upper[0, 0, 10])
    assert inside.float().mean() > 0.99
    assert (fine[..., 1:, :] >= fine[..., :-1, :]).all()


def test_random_draws_follow_the_reference_order_and_shapes():
    calls = []
    real_rand = torch.rand

    def recording_rand(*size, **kwargs):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
        calls.append(shape)
        return real_rand(*size, **kwargs)

    def field(position, direction, heads):
        n = position.shape[1]
        values = {h: torch.full((1, n, 3 if h.startswith("color") else 1), 0.5) for h in heads}
        return NeRSTFOutput(**values)

    rays = torch.zeros(1, 5, 2, 3)
    rays[..., 0, 2] = -4.0
    rays[..., 1, 2] = 1.0
    torch.rand = recording_rand
    try:
        render_rays(field, rays, BOX, torch.zeros(3), 64, 128)
    finally:
        torch.rand = real_rand
    assert calls == [(1, 5, 64), (5, 128), (1, 5, 128, 1)]


def test_generator_makes_renders_reproducible_without_touching_the_global_rng():
    def field(position, direction, heads):
        density = (1 - position.norm(dim=-1, keepdim=True)).clamp(min=0) * 5
        color = torch.sigmoid(position)
        return NeRSTFOutput(**{h: color if h.startswith("color") else density for h in heads})

    rays = torch.zeros(1, 7, 2, 3)
    rays[..., 0, 2] = -4.0
    rays[..., 1, :] = torch.nn.functional.normalize(torch.tensor([0.05, 0.0, 1.0]), dim=0)
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    a = render_rays(field, rays, BOX, torch.zeros(3), 16, 32, generator=torch.Generator().manual_seed(3))
    after = torch.rand(1)
    b = render_rays(field, rays, BOX, torch.zeros(3), 16, 32, generator=torch.Generator().manual_seed(3))
    assert torch.equal(before, after)
    assert torch.equal(a.channels, b.channels) and torch.equal(a.raw_density, b.raw_density)
    assert a.raw_density.shape == (1, 7, 48)
    assert a.transmittance.max() < 1  # the ray crosses the dense ball


def test_default_queries_render_like_the_reference_queries_with_fewer_points():
    queried = []

    def field(position, direction, heads):
        queried.append(position.shape[1])
        density = (0.8 - position.norm(dim=-1, keepdim=True)).clamp(min=0) * 4
        values = {"sdf": 0.8 - position.norm(dim=-1, keepdim=True), "color": torch.sigmoid(3 * position)}
        return NeRSTFOutput(**{h: values["color"] if h.startswith("color") else
                               (values["sdf"] if h == "sdf" else density) for h in heads})

    rays = torch.zeros(1, 7, 2, 3)
    rays[..., 0, 2] = -4.0
    rays[..., 0, 0] = torch.linspace(-0.9, 0.9, 7)
    rays[0, 6, 0, 0] = 1.5  # misses the box
    rays[..., 1, 2] = 1.0
    renders, counts = [], []
    for reference in (True, False):
        queried.clear()
        renders.append(render_rays(field, rays, BOX, torch.zeros(3), 16, 32,
                                   generator=torch.Generator().manual_seed(2), reference_queries=reference))
        counts.append(sum(queried))
    reference, fast = renders
    assert counts == [7 * (16 + 48), 6 * (16 + 32)]
    for name in ("channels", "transmittance", "distances", "channels_coarse", "transmittance_coarse"):
        assert torch.equal(getattr(reference, name), getattr(fast, name)), name
    for name in ("raw_signed_distance", "raw_density"):
        assert torch.equal(getattr(reference, name)[:, :6], getattr(fast, name)[:, :6]), name
        assert (getattr(fast, name)[:, 6] == 0).all()
    assert reference.transmittance[0, :6].min() < 0.9 and reference.transmittance[0, 6] == 1
