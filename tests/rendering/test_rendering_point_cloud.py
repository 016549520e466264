"""Farthest-point sampling (exact, bucketed) and the official `PointCloud`."""
import io
import random

import numpy as np
import pytest
import torch
import trimesh

from shap_e.rendering.point_cloud import PointCloud, farthest_point_sample, preprocess
from shap_e.rendering.ply_util import ply_bytes
from shap_e.rendering.view_data import MemoryViewData, ProjectiveCamera


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _brute_force_fps(points, n, first):
    dist = torch.full((len(points),), float("inf"))
    chosen = [first]
    for _ in range(n - 1):
        dist = torch.minimum(dist, ((points - points[chosen[-1]]) ** 2).sum(-1))
        chosen.append(int(dist.argmax()))
    return torch.tensor(chosen)



@pytest.mark.parametrize("bucket_size", [1, 16, 64, 4096])
def test_fps_matches_brute_force_exactly(bucket_size):
    points = torch.rand(1500, 3, generator=_gen(3)) * torch.tensor([2.0, 1.0, 0.5])
    chosen, _ = farthest_point_sample(points, 120, _gen(1), bucket_size=bucket_size)
    assert torch.equal(chosen, _brute_force_fps(points, 120, int(chosen[0])))


def test_fps_each_next_point_is_farthest_from_the_chosen_set():
    points = torch.randn(800, 3, generator=_gen(5))
    chosen, _ = farthest_point_sample(points, 50, _gen(2))
    for k in range(1, 50):
        to_set = torch.cdist(points, points[chosen[:k]]).amin(dim=1)
        assert to_set[chosen[k]] == pytest.approx(float(to_set.max()), rel=1e-5)
    assert len(set(chosen.tolist())) == 50


def test_fps_cells_are_the_nearest_chosen_point():
    points = torch.rand(2000, 3, generator=_gen(7))
    chosen, cell = farthest_point_sample(points, 64, _gen(0), bucket_size=32)
    d = ((points[:, None] - points[chosen][None]) ** 2).sum(-1)
    assert torch.equal(d.gather(1, cell[:, None])[:, 0], d.amin(dim=1))
    assert torch.equal(cell[chosen], torch.arange(64))


def test_fps_first_point_comes_from_the_generator():
    points = torch.rand(500, 3, generator=_gen(0))
    a, _ = farthest_point_sample(points, 10, _gen(11))
    b, _ = farthest_point_sample(points, 10, _gen(11))
    assert torch.equal(a, b)
    assert int(a[0]) == int(torch.randint(500, (1,), generator=_gen(11)))


def test_fps_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_samples"):
        farthest_point_sample(torch.rand(5, 3), 6)
    with pytest.raises(ValueError, match="points"):
        farthest_point_sample(torch.rand(5, 2), 2)


def test_fps_start_index_and_no_repeats_on_duplicate_points():
    points = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0]])
    chosen, cell = farthest_point_sample(points, 5, start=1, bucket_size=2)
    assert int(chosen[0]) == 1 and sorted(chosen.tolist()) == [0, 1, 2, 3, 4]
    assert torch.equal(cell[chosen], torch.arange(5))
    with pytest.raises(ValueError, match="start"):
        farthest_point_sample(points, 2, start=5)


def test_fps_computes_in_the_input_float_dtype():
    points = torch.rand(300, 3, generator=_gen(8), dtype=torch.float64)
    chosen, _ = farthest_point_sample(points, 30, start=0)
    assert chosen.tolist() == _brute_force_fps(points, 30, 0).tolist()


def _cloud(n=200, seed=0) -> PointCloud:
    rng = np.random.default_rng(seed)
    coords = rng.random((n, 3)).astype(np.float32)
    return PointCloud(coords, {c: rng.random(n).astype(np.float32) for c in "RGB"} | {"A": np.ones(n, np.float32)})


def test_save_and_load_round_trip_through_paths_and_streams(tmp_path):
    cloud = _cloud()
    cloud.save(tmp_path / "pc.npz")
    buffer = io.BytesIO()
    cloud.save(buffer)
    for source in (tmp_path / "pc.npz", str(tmp_path / "pc.npz"), io.BytesIO(buffer.getvalue())):
        loaded = PointCloud.load(source)
        assert np.array_equal(loaded.coords, cloud.coords) and loaded.channels.keys() == cloud.channels.keys()
        assert all(np.array_equal(loaded.channels[k], v) for k, v in cloud.channels.items())


def test_write_ply_is_the_shared_ply_writer_with_colours():
    cloud = _cloud(20)
    out = io.BytesIO()
    cloud.write_ply(out)
    rgb = np.stack([cloud.channels[c] for c in "RGB"], axis=1)
    assert out.getvalue() == ply_bytes(cloud.coords, rgb)
    loaded = trimesh.load(io.BytesIO(out.getvalue()), file_type="ply")
    np.testing.assert_array_equal(np.asarray(loaded.vertices, np.float32), cloud.coords)
    plain = io.BytesIO()
    PointCloud(cloud.coords, {}).write_ply(plain)
    assert b"red" not in plain.getvalue() and b"face" not in plain.getvalue()


def test_farthest_point_sample_subsamples_in_farthest_point_order():
    cloud = _cloud(300)
    sub = cloud.farthest_point_sample(25, init_idx=7)
    expected = _brute_force_fps(torch.from_numpy(cloud.coords), 25, 7).numpy()
    assert np.array_equal(sub.coords, cloud.coords[expected])
    assert np.array_equal(sub.channels["R"], cloud.channels["R"][expected])
    assert cloud.farthest_point_sample(300) is cloud
    random.seed(4)
    first = random.randrange(300)
    random.seed(4)
    assert np.array_equal(cloud.farthest_point_sample(5).coords[0], cloud.coords[first])


def test_random_sample_draws_distinct_points():
    cloud = _cloud(100)
    np.random.seed(0)
    sub = cloud.random_sample(30)
    assert len(np.unique(sub.coords, axis=0)) == 30 and cloud.random_sample(100) is cloud


def test_subsample_can_average_each_kept_points_nearest_neighbours():
    coords = np.array([[0.0, 0, 0], [0.1, 0, 0], [1, 0, 0], [1.1, 0, 0], [0.05, 0, 0]])
    cloud = PointCloud(coords, {"R": np.array([0.0, 1.0, 2.0, 4.0, 2.0])})
    plain = cloud.subsample(np.array([0, 2]))
    assert plain.channels["R"].tolist() == [0.0, 2.0]
    averaged = cloud.subsample(np.array([0, 2]), average_neighbors=True)
    assert averaged.channels["R"].tolist() == [1.0, 3.0]
    assert cloud.nearest_points(np.array([[0.9, 0, 0], [0.06, 0, 0]])).tolist() == [2, 4]


def test_select_channels_scales_colours_only():
    cloud = PointCloud(np.zeros((2, 3)), {"R": np.array([0.5, 1.0]), "D": np.array([3.0, 4.0])})
    assert cloud.select_channels(["R", "D"]).tolist() == [[128.0, 3.0], [255.0, 4.0]]
    assert preprocess(np.array([0.2]), "A").tolist() == [51.0] and preprocess(np.array([0.2]), "X").tolist() == [0.2]


def test_combine_concatenates_points_with_the_same_channels():
    a, b = _cloud(3), _cloud(4, seed=1)
    both = a.combine(b)
    assert len(both.coords) == 7 and np.array_equal(both.channels["G"][3:], b.channels["G"])
    with pytest.raises(ValueError, match="different channels"):
        a.combine(PointCloud(b.coords, {}))


def test_from_rgbd_back_projects_depth_along_the_view_direction():
    camera = ProjectiveCamera(origin=np.array([0.0, 0, -3]), x=np.array([1.0, 0, 0]), y=np.array([0.0, 1, 0]),
                              z=np.array([0.0, 0, 1]), width=4, height=4, x_fov=0.8, y_fov=0.8)
    depth = np.full((1, 4, 4), 3.0)
    depth[0, 0, 0] = np.inf
    alpha = np.ones((1, 4, 4))
    alpha[0, 3, 3] = 0.5
    vd = MemoryViewData({"D": depth, "A": alpha, "R": np.full((1, 4, 4), 0.25)}, [camera])
    cloud = PointCloud.from_rgbd(vd)
    assert len(cloud.coords) == 14 and sorted(cloud.channels) == ["A", "R"]
    np.testing.assert_allclose(cloud.coords[:, 2], 0.0, atol=1e-12)  # the plane z = 0, 3 in front of the camera
    with pytest.raises(ValueError, match="depth"):
        PointCloud.from_rgbd(MemoryViewData({"R": depth}, [camera]))
