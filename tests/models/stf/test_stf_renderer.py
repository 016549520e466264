"""`shap_e.models.stf.renderer`: the official STF helpers against golden f."""
import pytest
import torch

from shap_e.models.stf.renderer import cross_entropy_sdf_loss, slice_fields, volume_query_points
from shap_e.rendering.volume import BoundingBox


def test_cross_entropy_sdf_loss_is_the_official_aux_loss(golden):
    stf = golden("f")["outputs"]["stf"]
    loss = cross_entropy_sdf_loss(stf["fields_padded"])
    assert loss.shape == ()
    torch.testing.assert_close(loss, stf["cross_entropy_aux_loss"], atol=1e-5, rtol=0)


def test_cross_entropy_sdf_loss_is_lower_for_smooth_fields_than_for_noise():
    axis = torch.linspace(-1, 1, 12)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    sphere = (0.6 - (x**2 + y**2 + z**2).sqrt())[None]
    noise = torch.randn(1, 12, 12, 12, generator=torch.Generator().manual_seed(0)) * 0.3
    assert cross_entropy_sdf_loss(sphere) < cross_entropy_sdf_loss(noise)


def test_slice_fields_cuts_one_grid_axis():
    fields = torch.arange(2 * 3 * 4 * 5).view(2, 3, 4, 5)
    assert torch.equal(slice_fields(fields, 1, 0, -1), fields[:, :-1])
    assert torch.equal(slice_fields(fields, 2, 1, 4), fields[:, :, 1:4])
    assert torch.equal(slice_fields(fields, 3, 0, 2), fields[..., :2])
    with pytest.raises(ValueError, match="grid axis"):
        slice_fields(fields, 0, 0, 1)


def test_volume_query_points_span_the_box_with_z_fastest():
    box = BoundingBox(bbox_min=torch.tensor([-1.0, -2.0, 0.0]), bbox_max=torch.tensor([1.0, 2.0, 3.0]))
    points = volume_query_points(box, 4)
    assert points.shape == (64, 3)
    assert torch.equal(points[0], box.bbox_min) and torch.equal(points[-1], box.bbox_max)
    torch.testing.assert_close(points[1], torch.tensor([-1.0, -2.0, 1.0]))  # z moves first
    torch.testing.assert_close(points[16], torch.tensor([-1.0 + 2 / 3, -2.0, 0.0]))  # x moves last
    with pytest.raises(TypeError, match="BoundingBoxVolume"):
        volume_query_points(object(), 4)
