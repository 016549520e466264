"""PointNet++ helpers and layers compute what PointNet++ defines (Qi et al. 2017)."""
import numpy as np
import pytest
import torch

from shap_e.models.nn import pointnet2_utils as pn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_square_distance_and_index_points():
    a, b = torch.randn(2, 5, 3, generator=_gen(0)), torch.randn(2, 4, 3, generator=_gen(1))
    torch.testing.assert_close(pn.square_distance(a, b), torch.cdist(a, b) ** 2, atol=1e-5, rtol=1e-5)
    idx = torch.tensor([[[0, 2], [1, 1]], [[3, 0], [4, 4]]])
    gathered = pn.index_points(a, idx)
    assert gathered.shape == (2, 2, 2, 3) and torch.equal(gathered[1, 0, 0], a[1, 3])
    assert pn.gather_points is pn.index_points and pn.ball_query is pn.query_ball_point


def test_ball_query_takes_the_smallest_indices_inside_and_pads_with_the_first():
    xyz = torch.tensor([[[0.0, 0, 0], [5, 0, 0], [0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0]]])
    centres = torch.tensor([[[0.0, 0, 0], [5, 0, 0]]])
    idx = pn.query_ball_point(0.25, 3, xyz, centres)
    assert idx.tolist() == [[[0, 2, 3], [1, 1, 1]]]
    # More samples than points: one column per point, as the reference's slice gives.
    assert pn.query_ball_point(0.25, 9, xyz, centres).shape == (1, 2, 5)


def _brute_force_fps(points: torch.Tensor, n: int, first: int) -> list:
    chosen, dist = [first], torch.full((len(points),), float("inf"))
    for _ in range(n - 1):
        dist = torch.minimum(dist, ((points - points[chosen[-1]]) ** 2).sum(-1))
        chosen.append(int(dist.argmax()))
    return chosen


def test_farthest_point_sample_starts_as_the_reference_and_picks_farthest_points():
    xyz = torch.rand(3, 200, 3, generator=_gen(2))
    idx = pn.farthest_point_sample(xyz, 16, deterministic=True)
    assert idx.shape == (3, 16)
    for b in range(3):  # deterministic: batch element b starts at point b
        assert idx[b].tolist() == _brute_force_fps(xyz[b], 16, b)
    drawn = pn.farthest_point_sample(xyz, 4, generator=_gen(5))
    assert drawn[:, 0].tolist() == torch.randint(0, 200, (3,), generator=_gen(5)).tolist()


def test_sample_and_group_returns_offsets_then_features():
    xyz, points = torch.rand(2, 50, 3, generator=_gen(3)), torch.randn(2, 50, 4, generator=_gen(4))
    new_xyz, new_points, grouped_xyz, fps_idx = pn.sample_and_group(6, 0.4, 5, xyz, points, returnfps=True,
                                                                    fps_method="first")
    assert torch.equal(fps_idx[0], torch.arange(6)) and torch.equal(new_xyz, xyz[:, :6])
    idx = pn.query_ball_point(0.4, 5, xyz, new_xyz)
    assert torch.equal(new_points[..., :3], pn.index_points(xyz, idx) - new_xyz[:, :, None])
    assert torch.equal(new_points[..., 3:], pn.index_points(points, idx))
    assert torch.equal(grouped_xyz, pn.index_points(xyz, idx))
    all_xyz, all_points = pn.sample_and_group_all(xyz, points)
    assert not all_xyz.any() and torch.equal(all_points[:, 0], torch.cat([xyz, points], dim=-1))


def test_set_abstraction_is_max_of_a_shared_mlp_over_each_group():
    torch.manual_seed(0)
    layer = pn.PointNetSetAbstraction(4, 0.5, 6, 3 + 2, [8, 5], group_all=False).eval()
    xyz, points = torch.rand(2, 3, 30), torch.randn(2, 2, 30)
    new_xyz, features = layer(xyz, points)
    _, grouped = pn.sample_and_group(4, 0.5, 6, xyz.permute(0, 2, 1), points.permute(0, 2, 1), deterministic=True)
    h = grouped
    for conv, bn in zip(layer.mlp_convs, layer.mlp_bns):
        h = torch.relu(bn(conv(h.permute(0, 3, 2, 1))).permute(0, 3, 2, 1))
    assert new_xyz.shape == (2, 3, 4)
    torch.testing.assert_close(features, h.max(dim=2).values.permute(0, 2, 1))


def test_multi_scale_set_abstraction_concatenates_one_feature_block_per_radius():
    torch.manual_seed(0)
    layer = pn.PointNetSetAbstractionMsg(5, [0.2, 0.6], [4, 8], 2, [[6], [3, 7]]).eval()
    new_xyz, features = layer(torch.rand(2, 3, 40), torch.randn(2, 2, 40))
    assert new_xyz.shape == (2, 3, 5) and features.shape == (2, 13, 5)
    assert (features >= 0).all()  # relu then max


def test_feature_propagation_interpolates_from_the_three_nearest():
    layer = pn.PointNetFeaturePropagation(1, [])
    sparse = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [5, 5, 5]]]).permute(0, 2, 1)
    values = torch.tensor([[[1.0, 2.0, 3.0, 100.0]]])
    dense = torch.tensor([[[0.5, 0.0, 0.0]]]).permute(0, 2, 1)
    out = layer(dense, sparse, None, values)
    w = 1 / torch.tensor([0.25, 0.25, 1.25])  # squared distances to the 3 nearest
    assert out.item() == pytest.approx(float((w * torch.tensor([1.0, 2.0, 3.0])).sum() / w.sum()), rel=1e-5)
    single = layer(dense, sparse[..., :1], None, values[..., :1])
    assert single.item() == 1.0


def test_pc_normalize_and_timeit(capsys):
    pc = np.array([[1.0, 0, 0], [3, 0, 0], [2, 2, 0]])
    out = pn.pc_normalize(pc)
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-12)
    assert np.linalg.norm(out, axis=1).max() == pytest.approx(1.0)
    now = pn.timeit("step", 0.0)
    assert now > 0 and capsys.readouterr().out.startswith("step: ")
