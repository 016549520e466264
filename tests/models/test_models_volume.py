"""Official volume modules: the box is the intersection of docs/behaviour.md#render-volume (golden f);
sphere and unbounded ranges match their geometry; `VolumeRange` combines ranges."""
import math

import pytest
import torch

from shap_e.models.volume import BoundingBoxVolume, SphericalVolume, UnboundedVolume, VolumeRange
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.rendering.volume import RayRange


def test_bounding_box_volume_matches_golden_ranges(golden):
    f = golden("f")
    volume = BoundingBoxVolume(bbox_min=[-1.0, -1.0, -1.0], bbox_max=[1.0, 1.0, 1.0], device="cpu")
    assert volume.bbox.shape == (2, 3) and list(volume.state_dict()) == []
    rays = create_pan_cameras(16).rays()[f["inputs"]["nerf_camera_indices_in_pan16"]].view(1, 512, 2, 3)
    r = volume.intersect(rays[..., 0, :], rays[..., 1, :])
    ref = f["outputs"]["nerf_nodir"]
    torch.testing.assert_close(r.t0.view(1, 2, 16, 16, 1), ref["t0"], atol=1e-6, rtol=0)
    torch.testing.assert_close(r.t1.view(1, 2, 16, 16, 1), ref["t1"], atol=1e-6, rtol=0)
    assert torch.equal(r.intersected.view(1, 2, 16, 16, 1), ref["intersected"])


def test_t0_lower_raises_the_entry_distance():
    volume = BoundingBoxVolume(bbox_min=[-1.0] * 3, bbox_max=[1.0] * 3)
    o, d = torch.tensor([[[0.0, 0.0, -4.0]]]), torch.tensor([[[0.0, 0.0, 1.0]]])
    assert volume.intersect(o, d, t0_lower=torch.tensor([[[4.5]]])).t0.item() == 4.5
    r = volume.intersect(o, d, t0_lower=torch.tensor([[[5.5]]]))
    assert not r.intersected.item() and (r.t0.item(), r.t1.item()) == (0.0, 1.0)
    with pytest.raises(ValueError, match="t0_lower"):
        volume.intersect(o, d, t0_lower=torch.zeros(3))


def test_spherical_volume_enters_and_leaves_the_ball():
    volume = SphericalVolume(radius=2.0, center=(1.0, 0.0, 0.0))
    o = torch.tensor([[[1.0, 0.0, -5.0], [1.0, 0.0, 0.5], [4.0, 0.0, -5.0], [1.0, 1.9, -5.0]]])
    d = torch.tensor([[[0.0, 0.0, 2.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]])
    r = volume.intersect(o, d)
    assert r.intersected[0, :, 0].tolist() == [True, True, False, True]
    torch.testing.assert_close(r.t0[0, :, 0], torch.tensor([1.5, 0.0, 0.0, 5 - math.sqrt(4 - 1.9**2)]))
    torch.testing.assert_close(r.t1[0, :, 0], torch.tensor([3.5, 1.5, 1.0, 5 + math.sqrt(4 - 1.9**2)]))
    with pytest.raises(ValueError, match="radius"):
        SphericalVolume(radius=0.0)


def test_unbounded_volume_spans_max_dist_from_the_start():
    volume = UnboundedVolume(max_dist=10.0, min_dist=0.5)
    o = torch.zeros(2, 3, 3)
    r = volume.intersect(o, torch.ones(2, 3, 3), t0_lower=torch.full((2, 3, 1), 2.0))
    assert torch.equal(r.t0, torch.full((2, 3, 1), 2.0)) and torch.equal(r.t1, torch.full((2, 3, 1), 12.0))
    assert torch.equal(volume.intersect(o, o).t0, torch.full((2, 3, 1), 0.5)) and r.intersected.all()
    with pytest.raises(ValueError, match="min_dist"):
        UnboundedVolume(max_dist=1.0, min_dist=-1.0)


def test_volume_range_next_t0_extend_and_partition():
    assert VolumeRange is RayRange
    inner = VolumeRange(torch.tensor([[1.0], [0.0]]), torch.tensor([[2.0], [1.0]]), torch.tensor([[True], [False]]))
    outer = VolumeRange(torch.tensor([[2.0], [3.0]]), torch.tensor([[6.0], [7.0]]), torch.tensor([[True], [True]]))
    assert inner.next_t0().tolist() == [[2.0], [0.0]]
    both = inner.extend(outer)
    assert both.t0.tolist() == [[1.0], [3.0]] and both.t1.tolist() == [[6.0], [7.0]] and both.intersected.all()
    ts = torch.tensor([[1.2, 1.6, 1.8], [0.1, 0.5, 0.9]])[..., None]
    lower, upper, delta = inner.partition(ts)
    assert lower[0, :, 0].tolist() == pytest.approx([1.0, 1.4, 1.7])
    assert upper[0, :, 0].tolist() == pytest.approx([1.4, 1.7, 2.0])
    torch.testing.assert_close(delta, upper - lower)
    with pytest.raises(ValueError, match="one shape"):
        VolumeRange(torch.zeros(2, 1), torch.zeros(3, 1), torch.zeros(2, 1, dtype=torch.bool))
