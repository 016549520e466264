"""Ray casting: exact nearest hits of rays on triangles (differentiable, checkpointed or not), and
diffuse renders that agree with the rasteriser's."""
import numpy as np
import pytest
import torch

from shap_e.rendering.cameras import create_pan_cameras
from shap_e.rendering.mesh import TriMesh as NumpyTriMesh
from shap_e.rendering.rasterize import rasterize, shade_vertex_colors
from shap_e.rendering.raycast._utils import cross_product, normalize
from shap_e.rendering.raycast.cast import cast_camera, cast_rays
from shap_e.rendering.raycast.render import render_diffuse_mesh
from shap_e.rendering.raycast.types import RayCollisions, Rays, TriMesh
from shap_e.rendering.view_data import ProjectiveCamera

# The triangle (0,0,0), (1,0,0), (0,1,0) in the plane z = 0, and a larger one behind it at z = 1.
MESH = TriMesh(
    faces=torch.tensor([[0, 1, 2], [3, 4, 5]]),
    vertices=torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [-5, -5, 1], [5, -5, 1], [0, 5, 1]]),
)


def _rays(origins, directions) -> Rays:
    return Rays(torch.tensor(origins, dtype=torch.float32), torch.tensor(directions, dtype=torch.float32))


def test_nearest_hit_distance_barycentrics_and_normal():
    rays = _rays([[0.2, 0.3, -2.0], [0.8, 0.8, -2.0], [0.2, 0.3, 2.0], [0.2, 0.3, -2.0], [9.0, 9.0, -2.0]],
                 [[0, 0, 2.0], [0, 0, 1], [0, 0, 1], [1, 0, 0], [0, 0, 1]])
    hits = cast_rays(rays, MESH)
    # 0: hits the front triangle at t = 1 (direction length 2); 1: inside the parallelogram
    # extension (b1 + b2 = 1.6) so only the back triangle; 2: starts behind both; 3: parallel; 4: beside.
    assert hits.collides.tolist() == [True, True, False, False, False]
    assert hits.tri_indices[:2].tolist() == [0, 1]
    torch.testing.assert_close(hits.ray_dists[:2], torch.tensor([1.0, 3.0]))
    assert torch.isinf(hits.ray_dists[2:]).all()
    torch.testing.assert_close(hits.barycentric[0], torch.tensor([0.5, 0.2, 0.3]))
    torch.testing.assert_close(hits.normals[0], torch.tensor([0.0, 0.0, 1.0]))


def test_checkpointed_cast_gives_the_same_hits_and_gradients():
    vertices = MESH.vertices.clone().requires_grad_(True)
    origins = torch.tensor([[0.2, 0.3, -2.0], [0.1, 0.1, -1.0]], requires_grad=True)
    directions = torch.tensor([[0.0, 0.1, 1.0], [0.1, 0.0, 1.0]])
    results = []
    for flag in (False, True):
        hits = cast_rays(Rays(origins, directions), TriMesh(MESH.faces, vertices), checkpoint=flag)
        loss = (hits.ray_dists * torch.tensor([1.0, 2.0])).sum() + (hits.barycentric**2).sum() + hits.normals[:, 1].sum()
        results.append((hits, torch.autograd.grad(loss, [vertices, origins])))
    (plain, plain_grads), (ckpt, ckpt_grads) = results
    assert torch.equal(plain.collides, ckpt.collides) and torch.equal(plain.tri_indices, ckpt.tri_indices)
    torch.testing.assert_close(plain.barycentric, ckpt.barycentric)
    for a, b in zip(plain_grads, ckpt_grads):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b)


def test_ray_distance_gradient_matches_finite_differences():
    origin = torch.tensor([[0.2, 0.3, -2.0]], dtype=torch.float64)
    direction = torch.tensor([[0.1, 0.05, 1.0]], dtype=torch.float64)
    vertices = torch.tensor([[0.0, 0, 0], [1, 0, 0.2], [0, 1, -0.1]], dtype=torch.float64, requires_grad=True)
    mesh = TriMesh(torch.tensor([[0, 1, 2]]), vertices)
    (grad,) = torch.autograd.grad(cast_rays(Rays(origin, direction), mesh).ray_dists.sum(), [vertices])
    step = 1e-6
    for v, axis in [(1, 2), (2, 2), (0, 0)]:
        moved = vertices.detach().clone()
        moved[v, axis] += step
        up = cast_rays(Rays(origin, direction), TriMesh(mesh.faces, moved)).ray_dists
        moved[v, axis] -= 2 * step
        down = cast_rays(Rays(origin, direction), TriMesh(mesh.faces, moved)).ray_dists
        assert grad[v, axis].item() == pytest.approx(((up - down) / (2 * step)).item(), rel=1e-5, abs=1e-9)


def _golden_mesh(golden) -> TriMesh:
    m = golden("f")["outputs"]["decode_latent_mesh"]["mesh"]
    colors = torch.stack([m["vertex_channels"][c] for c in "RGB"], dim=-1)
    return TriMesh(faces=m["faces"], vertices=m["verts"], vertex_colors=colors)


def test_cast_camera_batches_give_the_same_collisions(golden):
    mesh = _golden_mesh(golden)
    camera = ProjectiveCamera.from_torch(create_pan_cameras(12), index=3)
    whole = RayCollisions.collect(cast_camera(camera, mesh))
    batched = RayCollisions.collect(cast_camera(camera, mesh, ray_batch_size=50))
    assert whole.collides.any() and not whole.collides.all()
    for a, b in zip((whole.collides, whole.tri_indices), (batched.collides, batched.tri_indices)):
        assert torch.equal(a, b)
    torch.testing.assert_close(whole.ray_dists, batched.ray_dists)


@pytest.mark.parametrize("view", [0, 13])
def test_diffuse_render_agrees_with_the_rasteriser(golden, view):
    mesh = _golden_mesh(golden)
    pan = create_pan_cameras(16)
    image = render_diffuse_mesh(ProjectiveCamera.from_torch(pan, index=view), mesh)
    assert image.shape == (16, 16, 4)
    views = pan.reshape(20)
    one = type(pan)(origin=views.origin[view:view + 1], x=views.x[view:view + 1], y=views.y[view:view + 1],
                    z=views.z[view:view + 1], width=16, height=16, x_fov=pan.x_fov, y_fov=pan.y_fov)
    fragments = rasterize(mesh.vertices, mesh.faces, one)
    rgb, alpha = shade_vertex_colors(fragments, mesh.vertices, mesh.faces, mesh.vertex_colors)
    same = image[..., 3] == alpha[0]
    assert same.float().mean() > 0.99  # pixel centres exactly on a silhouette edge may differ
    torch.testing.assert_close(image[..., :3][same], rgb[0][same], atol=1e-4, rtol=0)


def test_diffuse_render_without_colours_is_grey_and_empty_meshes_are_blank():
    camera = ProjectiveCamera(origin=np.array([0.25, 0.25, -3.0]), x=np.array([1.0, 0, 0]), y=np.array([0.0, 1, 0]),
                              z=np.array([0.0, 0, 1]), width=3, height=3, x_fov=0.1, y_fov=0.1)
    front = TriMesh(MESH.faces[:1], MESH.vertices)
    image = render_diffuse_mesh(camera, front, light_direction=(0.0, 0.0, -1.0))
    assert image[..., 3].all()
    torch.testing.assert_close(image[..., :3], torch.full((3, 3, 3), 0.8))  # 0.8 x (0.3 + 0.7 |n.l|)
    empty = render_diffuse_mesh(camera, TriMesh(torch.zeros(0, 3, dtype=torch.int64), torch.zeros(0, 3)))
    assert empty.shape == (3, 3, 4) and not empty.any()


def test_types_and_vector_helpers():
    assert torch.equal(_rays([[0, 0, 0]], [[0, 3.0, 4.0]]).normalized_directions(), torch.tensor([[0, 0.6, 0.8]]))
    torch.testing.assert_close(MESH.normals(), torch.tensor([[0.0, 0, 1], [0, 0, 1]]))
    assert MESH.to(torch.float64).vertices.dtype == torch.float64
    tri = NumpyTriMesh(np.zeros((3, 3), np.float32), np.array([[0, 1, 2]]),
                       vertex_channels={c: np.full(3, 0.5, np.float32) for c in "RGB"})
    converted = TriMesh.from_numpy(tri)
    assert converted.vertex_colors.shape == (3, 3) and TriMesh.from_numpy(NumpyTriMesh(tri.verts, tri.faces)).vertex_colors is None
    a, b = torch.randn(4, 1, 3), torch.randn(1, 5, 3)
    torch.testing.assert_close(cross_product(a, b), torch.cross(a.expand(4, 5, 3), b.expand(4, 5, 3), dim=-1))
    torch.testing.assert_close(normalize(torch.tensor([[3.0, 0, 4]])), torch.tensor([[0.6, 0, 0.8]]))
    with pytest.raises(ValueError, match="empty"):
        RayCollisions.collect([])
    with pytest.raises(ValueError, match="origins and directions"):
        cast_rays(Rays(torch.zeros(2, 3), torch.zeros(3, 3)), MESH)
