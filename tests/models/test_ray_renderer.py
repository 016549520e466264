"""The official renderer interface: cameras or poses in an AttrDict batch -> chunked rays -> views."""
import pytest
import torch

from shap_e.models.nn.camera import DifferentiableCameraBatch, camera_batch
from shap_e.models.renderer import RayRenderer, append_tensor, get_camera_from_batch, render_views_from_rays
from shap_e.rendering.cameras import create_pan_cameras, look_at
from shap_e.util.collections import AttrDict


class DirectionRenderer(RayRenderer):
    """Colours a ray by its direction and puts every surface at distance 2; one aux loss per chunk
    (the chunk's ray count), to see the chunks."""

    def render_rays(self, batch, params=None, options=None):
        rays = batch.rays
        return AttrDict(
            channels=rays[..., 1, :],
            distances=torch.full_like(rays[..., :1, 0], 2.0),
            aux_losses=AttrDict(count=torch.tensor(float(rays.shape[1]))),
        )


def test_views_are_shaped_per_pixel_and_do_not_depend_on_the_chunking():
    cameras = camera_batch(create_pan_cameras(4))
    renderer = DirectionRenderer()
    whole = renderer.render_views(AttrDict(cameras=cameras, ray_batch_size=4096))
    chunked = renderer.render_views(AttrDict(cameras=cameras, ray_batch_size=7))
    assert whole.channels.shape == (1, 20, 4, 4, 3) and whole.depth.shape == (1, 20, 4, 4, 1)
    assert torch.equal(whole.channels, chunked.channels) and torch.equal(whole.depth, chunked.depth)
    rays = cameras.flat_camera.camera_rays(cameras.flat_camera.image_coords()[None].expand(20, -1, -1))
    assert torch.equal(whole.channels.reshape(20, 16, 3), rays[:, :, 1])
    # aux losses are the mean over chunks: 320 rays in chunks of 7 -> 45 of 7 and one of 5
    torch.testing.assert_close(chunked.aux_losses.count, torch.tensor((45 * 7 + 5) / 46))


def test_depth_is_the_distance_along_the_camera_axis():
    cameras = camera_batch(create_pan_cameras(5))
    out = render_views_from_rays(DirectionRenderer().render_rays, AttrDict(cameras=cameras))
    z = cameras.flat_camera.z.view(1, 20, 1, 1, 3)
    torch.testing.assert_close(out.depth[..., 0], 2.0 * (out.channels * z).sum(-1), atol=1e-6, rtol=0)
    centre = out.depth[0, :, 2, 2, 0]  # the centre pixel looks straight along z
    torch.testing.assert_close(centre, torch.full((20,), 2.0))


def test_poses_with_a_template_camera_render_like_the_same_cameras():
    origins = torch.tensor([[4.0, 0.0, 1.0], [0.0, -4.0, 2.0]])
    typed = look_at(origins, torch.zeros_like(origins), 6, 6, fov=0.7)
    template = camera_batch(create_pan_cameras(6)).flat_camera
    pose = torch.stack([origins, -origins], dim=1)[None]  # [1, 2, 2, 3] (position, toward)
    renderer = DirectionRenderer()
    from_pose = renderer.render_views(AttrDict(pose=pose, camera=template))
    from_cameras = renderer.render_views(AttrDict(cameras=camera_batch(typed.reshape(1, 2))))
    torch.testing.assert_close(from_pose.channels, from_cameras.channels, atol=1e-6, rtol=0)
    resized = renderer.render_views(AttrDict(pose=pose, camera=template, height=3, width=3))
    assert resized.channels.shape == (1, 2, 3, 3, 3)


def test_get_camera_from_batch_reads_shapes_and_refuses_what_it_cannot_render():
    typed = create_pan_cameras(4)
    camera, batch_size, inner = get_camera_from_batch(AttrDict(cameras=typed))
    assert (batch_size, inner, camera.width) == (1, (20,), 4)
    with pytest.raises(TypeError, match="DifferentiableCameraBatch"):
        get_camera_from_batch(AttrDict(cameras=[typed]))
    with pytest.raises(ValueError, match="'cameras'"):
        get_camera_from_batch(AttrDict(views=1))
    with pytest.raises(ValueError, match=r"\[batch, ..., 2, 3\]"):
        get_camera_from_batch(AttrDict(pose=torch.zeros(2, 3), camera=camera))


def test_forward_dispatches_on_the_batch_keys():
    renderer = DirectionRenderer()
    rays = torch.randn(1, 5, 2, 3)
    assert torch.equal(renderer(AttrDict(rays=rays)).channels, rays[..., 1, :])
    cameras = DifferentiableCameraBatch(shape=(1, 20), flat_camera=camera_batch(create_pan_cameras(2)).flat_camera)
    assert renderer(AttrDict(cameras=cameras)).channels.shape == (1, 20, 2, 2, 3)
    with pytest.raises(ValueError, match="drop"):
        renderer(AttrDict(rays=rays, cameras=cameras))
    with pytest.raises(ValueError, match="needs 'rays'"):
        renderer(AttrDict(points=rays))


def test_append_tensor_returns_a_new_list():
    first = append_tensor(None, torch.ones(1))
    second = append_tensor(first, torch.zeros(1))
    assert len(first) == 1 and len(second) == 2 and second[0] is first[0]
