"""The torch z-buffer rasteriser against analytic answers and a brute-force ray caster."""
import math

import numpy as np
import pytest
import torch
import trimesh

from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras, look_at
from shap_e.rendering.rasterize import (
    Fragments,
    face_normals,
    interpolate_vertex_attributes,
    rasterize,
    shade_vertex_colors,
)


def _front_camera(size: int, fov: float = math.pi / 2, distance: float = 2.0) -> ProjectiveCamera:
    """One camera at (0, 0, -distance) looking along +z (x right, y down)."""
    def t(v):
        return torch.tensor([v], dtype=torch.float32)

    return ProjectiveCamera(
        origin=t([0.0, 0.0, -distance]), x=t([1.0, 0.0, 0.0]), y=t([0.0, 1.0, 0.0]), z=t([0.0, 0.0, 1.0]),
        width=size, height=size, x_fov=fov, y_fov=fov,
    )


def _mesh_tensors(mesh: trimesh.Trimesh):
    return torch.tensor(mesh.vertices, dtype=torch.float32), torch.tensor(mesh.faces, dtype=torch.int64)


def _ray_cast(origins: np.ndarray, dirs: np.ndarray, triangles: np.ndarray):
    """Brute-force Moller-Trumbore in float64: nearest ray parameter `[R]` (inf = miss) and face `[R]`."""
    v0, e1, e2 = triangles[:, 0], triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0]
    p = np.cross(dirs[:, None], e2[None])
    det = (e1[None] * p).sum(-1)
    s = origins[:, None] - v0[None]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (s * p).sum(-1) / det
        q = np.cross(s, e1[None])
        w = (dirs[:, None] * q).sum(-1) / det
        t = (e2[None] * q).sum(-1) / det
    ok = (np.abs(det) > 1e-12) & (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 0)
    t = np.where(ok, t, np.inf)
    return t.min(axis=1), t.argmin(axis=1)


def _compare_with_ray_cast(mesh: trimesh.Trimesh, camera: ProjectiveCamera, fragments: Fragments):
    """Per view: fraction of pixels with equal coverage, max depth error, fraction of equal faces."""
    rays = camera.rays().double().numpy()
    results = []
    for i in range(camera.origin.shape[0]):
        t, face = _ray_cast(rays[i, :, 0], rays[i, :, 1], mesh.triangles)
        hit = np.isfinite(t)
        mask = fragments.mask[i].reshape(-1).numpy()
        both = hit & mask
        depth = t * (rays[i, :, 1] @ camera.z[i].double().numpy())
        err = np.abs(depth[both] - fragments.depth[i].reshape(-1).double().numpy()[both]).max()
        same_face = (face[both] == fragments.face_index[i].reshape(-1).numpy()[both]).mean()
        results.append(((hit == mask).mean(), err, same_face))
    return results


def test_single_tilted_triangle_matches_analytic_ray_plane_hits():
    verts = torch.tensor([[-2.0, -2.0, 0.0], [2.0, -2.0, 2.0], [-2.0, 2.0, -1.0]])
    faces = torch.tensor([[0, 1, 2]])
    camera = _front_camera(9)
    frags = rasterize(verts, faces, camera)
    rays = camera.rays()[0].double()  # [81, 2, 3]
    a, b, c = verts.double()
    normal = torch.linalg.cross(b - a, c - a)
    t = ((a - rays[:, 0]) @ normal) / (rays[:, 1] @ normal)
    hits = rays[:, 0] + t[:, None] * rays[:, 1]
    # Barycentrics of the hit points from a 3D solve (hit = a + s (b - a) + r (c - a)).
    basis = torch.stack([b - a, c - a], dim=1)  # [3, 2]
    sr = torch.linalg.lstsq(basis.expand(len(hits), 3, 2), (hits - a)[..., None]).solution[..., 0]
    bary = torch.stack([1 - sr[:, 0] - sr[:, 1], sr[:, 0], sr[:, 1]], dim=1)
    inside = (bary > 1e-9).all(dim=1)
    outside = (bary < -1e-9).any(dim=1)
    mask = frags.mask[0].reshape(-1)
    assert mask[inside].all() and not mask[outside].any()
    assert inside.sum() > 20
    assert torch.allclose(frags.depth[0].reshape(-1)[inside].double(), hits[inside, 2] + 2.0, atol=1e-5)
    assert torch.allclose(frags.bary[0].reshape(-1, 3)[inside].double(), bary[inside], atol=1e-5)
    assert torch.isinf(frags.depth[0].reshape(-1)[outside]).all()
    assert (frags.face_index[0].reshape(-1)[outside] == -1).all()


def test_interpolated_positions_lie_on_the_pixel_rays():
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=0.9)
    verts, faces = _mesh_tensors(mesh)
    camera = create_pan_cameras(32)
    frags = rasterize(verts, faces, camera)
    points = interpolate_vertex_attributes(frags, faces, verts)  # [20, 32, 32, 3]
    rays = camera.rays().view(20, 32, 32, 2, 3)
    mask = frags.mask
    offset = points[mask] - rays[..., 0, :][mask]
    along = (offset * rays[..., 1, :][mask]).sum(-1, keepdim=True)
    assert (offset - along * rays[..., 1, :][mask]).norm(dim=-1).max() < 1e-4
    z_depth = (offset * camera.z.view(20, 1, 1, 3).expand(20, 32, 32, 3)[mask]).sum(-1)
    assert torch.allclose(z_depth, frags.depth[mask], atol=1e-4)


def test_box_depth_matches_ray_slab_intersection():
    mesh = trimesh.creation.box(extents=[2.0, 2.0, 2.0])
    verts, faces = _mesh_tensors(mesh)
    camera = look_at(torch.tensor([[3.0, 1.2, 2.1]]), torch.zeros(1, 3), 48, 48, fov=0.9)
    frags = rasterize(verts, faces, camera)
    rays = camera.rays()[0].double()
    with np.errstate(divide="ignore"):
        inv = 1 / rays[:, 1]
    t0 = (-1 - rays[:, 0]) * inv
    t1 = (1 - rays[:, 0]) * inv
    t_near = torch.minimum(t0, t1).amax(dim=1)
    t_far = torch.maximum(t0, t1).amin(dim=1)
    hit = t_near <= t_far
    mask = frags.mask[0].reshape(-1)
    assert (hit == mask).double().mean() > 0.99
    both = hit & mask
    depth = t_near * (rays[:, 1] @ camera.z[0].double())
    assert torch.allclose(frags.depth[0].reshape(-1)[both].double(), depth[both], atol=1e-4)


def test_sphere_agrees_with_brute_force_ray_casting():
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    verts, faces = _mesh_tensors(mesh)
    camera = create_pan_cameras(48)
    index = torch.tensor([0, 4, 11])
    camera = ProjectiveCamera(
        origin=camera.origin[index], x=camera.x[index], y=camera.y[index], z=camera.z[index],
        width=48, height=48, x_fov=camera.x_fov, y_fov=camera.y_fov,
    )
    frags = rasterize(verts, faces, camera)
    for coverage, depth_error, same_face in _compare_with_ray_cast(mesh, camera, frags):
        assert coverage > 0.99
        assert depth_error < 1e-4
        assert same_face > 0.99


def test_chunk_size_does_not_change_the_result():
    mesh = trimesh.creation.icosphere(subdivisions=3, radius=1.0)
    verts, faces = _mesh_tensors(mesh)
    camera = create_pan_cameras(32)
    full = rasterize(verts, faces, camera)
    chunked = rasterize(verts, faces, camera, max_candidates=50)
    assert torch.equal(full.face_index, chunked.face_index)
    assert torch.equal(full.depth, chunked.depth)
    assert torch.equal(full.bary, chunked.bary)


def test_nearer_triangle_wins_regardless_of_face_order():
    near = [[-3.0, -3.0, 1.0], [3.0, -3.0, 1.0], [0.0, 3.0, 1.0]]
    far = [[-3.0, -3.0, 2.0], [3.0, -3.0, 2.0], [0.0, 3.0, 2.0]]
    camera = _front_camera(7)
    for order, near_index in (((far, near), 1), ((near, far), 0)):
        verts = torch.tensor(order[0] + order[1])
        frags = rasterize(verts, torch.tensor([[0, 1, 2], [3, 4, 5]]), camera)
        centre = frags.face_index[0, 3, 3]
        assert centre == near_index
        assert frags.depth[0, 3, 3] == pytest.approx(3.0, abs=1e-6)


def test_faces_behind_the_camera_are_not_drawn():
    verts = torch.tensor([[-1.0, -1.0, -3.0], [1.0, -1.0, -3.0], [0.0, 1.0, -3.0]])
    frags = rasterize(verts, torch.tensor([[0, 1, 2]]), _front_camera(8))
    assert not frags.mask.any()
    assert torch.isinf(frags.depth).all()


def test_bad_inputs_raise_value_errors():
    camera = _front_camera(4)
    with pytest.raises(ValueError, match="verts"):
        rasterize(torch.zeros(3, 2), torch.tensor([[0, 1, 2]]), camera)
    with pytest.raises(ValueError, match="faces"):
        rasterize(torch.zeros(3, 3), torch.tensor([[0, 1, 3]]), camera)
    with pytest.raises(ValueError, match="attrs"):
        frags = rasterize(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]), camera)
        interpolate_vertex_attributes(frags, torch.tensor([[0, 1, 2]]), torch.zeros(3))


def test_face_normals_follow_the_right_hand_rule():
    verts = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0]])
    normals = face_normals(verts, torch.tensor([[0, 1, 2], [0, 2, 1], [3, 3, 3]]))
    assert torch.allclose(normals, torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.0]]))


def test_shading_is_ambient_plus_two_sided_diffuse():
    verts = torch.tensor([[-3.0, -3.0, 1.0], [3.0, -3.0, 1.0], [0.0, 3.0, 1.0]])
    faces = torch.tensor([[0, 1, 2]])
    colors = torch.tensor([[1.0, 0.0, 0.0]] * 3)
    frags = rasterize(verts, faces, _front_camera(7))
    light = (0.0, 0.6, 0.8)
    rgb, alpha = shade_vertex_colors(frags, verts, faces, colors, light_direction=light)
    flipped, _ = shade_vertex_colors(frags, verts, faces[:, [0, 2, 1]], colors, light_direction=light)
    expected = 0.3 + 0.7 * 0.8
    assert rgb[0, 3, 3].tolist() == pytest.approx([expected, 0.0, 0.0], abs=1e-6)
    assert torch.equal(rgb, flipped)
    assert torch.equal(alpha.bool(), frags.mask)
    assert (rgb[~frags.mask] == 0).all()
