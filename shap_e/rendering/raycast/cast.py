"""Nearest ray / triangle hits (official path; Moller & Trumbore 1997), differentiable in the ray
origins, directions and mesh vertices.

A hit needs `|det| > 1e-8`, `|d . n| > 1e-8`, barycentrics `b1, b2 >= 0` with `b1 + b2 <= 1`, and
`t > 0`. The reference omits the `b1 + b2 <= 1` test and so also hits the parallelogram that extends
each triangle; here only the triangle is hit. Rays are cast in chunks so that memory stays bounded
(the reference builds one `[rays, faces]` block).
"""
from typing import Iterator, Optional, Tuple

import torch

from shap_e.rendering.raycast._utils import cross_product
from shap_e.rendering.raycast.types import RayCollisions, Rays, TriMesh
from shap_e.rendering.view_data import ProjectiveCamera

__all__ = ["RayCollisionFunction", "cast_camera", "cast_rays"]

# Ray-triangle pairs evaluated at once: bounds the memory of one chunk (a dozen [rays, faces] tensors).
_PAIRS_PER_CHUNK = 1 << 21
_EPS = 1e-8


def cast_camera(
    camera: ProjectiveCamera,
    mesh: TriMesh,
    ray_batch_size: Optional[int] = None,
    checkpoint: Optional[bool] = None,
) -> Iterator[RayCollisions]:
    """Cast every pixel ray of `camera` (row-major) onto `mesh`, `ray_batch_size` rays per yielded
    `RayCollisions` (default: all at once). `checkpoint` (default: True when batched) recomputes the
    cast in the backward pass instead of keeping its graph."""
    rays = camera.camera_rays(camera.image_coords())
    batch_size = ray_batch_size or len(rays)
    if batch_size < 1:
        raise ValueError(f"ray_batch_size must be positive, got {ray_batch_size}")
    checkpoint = batch_size < len(rays) if checkpoint is None else checkpoint
    for start in range(0, len(rays), batch_size):
        chunk = torch.from_numpy(rays[start : start + batch_size]).to(mesh.vertices)
        yield cast_rays(Rays(origins=chunk[:, 0], directions=chunk[:, 1]), mesh, checkpoint=checkpoint)


def cast_rays(rays: Rays, mesh: TriMesh, checkpoint: bool = False) -> RayCollisions:
    """The nearest hit of each ray `[N]` on `mesh` (see the module docstring for what counts)."""
    if rays.origins.shape != rays.directions.shape or rays.origins.ndim != 2 or rays.origins.shape[-1] != 3:
        raise ValueError(
            f"ray origins and directions must both be [N, 3], got {tuple(rays.origins.shape)} "
            f"and {tuple(rays.directions.shape)}"
        )
    if checkpoint:
        return RayCollisions(*RayCollisionFunction.apply(rays.origins, rays.directions, mesh.faces, mesh.vertices))
    return RayCollisions(*_nearest_hits(rays.origins, rays.directions, mesh.faces.long(), mesh.vertices))


def _nearest_hits(origins, directions, faces, vertices) -> Tuple[torch.Tensor, ...]:
    """(collides, ray_dists, tri_indices, barycentric, normals) of rays `[N, 3]` on a mesh."""
    normals = TriMesh(faces=faces, vertices=vertices).normals()
    n_rays, n_faces = origins.shape[0], faces.shape[0]
    if n_faces == 0:
        empty = origins.new_zeros(n_rays, 3)
        return (torch.zeros(n_rays, dtype=torch.bool, device=origins.device), origins.new_full((n_rays,), torch.inf),
                torch.zeros(n_rays, dtype=torch.int64, device=origins.device), empty, empty)
    tris = vertices[faces]  # [F, 3, 3]
    v0, e1, e2 = tris[:, 0], tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0]
    area = cross_product(e1, e2)  # [F, 3], twice the area along the normal
    faces_terms = (v0, e1, e2, area, normals, cross_product(e2, v0), cross_product(v0, e1), (v0 * area).sum(-1))
    chunk = max(1, _PAIRS_PER_CHUNK // n_faces)
    parts = [
        _chunk_hits(origins[s : s + chunk], directions[s : s + chunk], *faces_terms)
        for s in range(0, n_rays, chunk)
    ]
    collides, dists, index, bary = (torch.cat(p) for p in zip(*parts)) if parts else _no_rays(origins)
    return collides, dists, index, bary, normals[index]


def _chunk_hits(o, d, v0, e1, e2, area, normals, e2_v0, v0_e1, v0_area):
    """Nearest hits of rays `o, d [M, 3]` on F triangles, from per-face terms `[F, 3]` / `[F]`.

    Moller-Trumbore's triple products, rewritten so that every `[M, F]` term is one matrix product
    of a per-ray and a per-face vector (with the ray's moment `o x d`), e.g.
    `det = e1 . (d x e2) = -d . (e1 x e2)` and `t det = (o - v0) . (e1 x e2)`.
    """
    moment = cross_product(o, d)  # [M, 3]
    det = -(d @ area.T)  # [M, F]
    valid = (det.abs() > _EPS) & ((d @ normals.T).abs() > _EPS)
    # A safe determinant keeps every value finite, so no NaN gradient leaks through `where`.
    inv_det = 1 / torch.where(valid, det, torch.ones_like(det))
    b1 = inv_det * (moment @ e2.T - d @ e2_v0.T)
    b2 = inv_det * (-(moment @ e1.T) - d @ v0_e1.T)
    t = inv_det * (o @ area.T - v0_area)
    hit = valid & (b1 >= 0) & (b2 >= 0) & (b1 + b2 <= 1) & (t > 0)
    dists, index = torch.where(hit, t, torch.full_like(t, torch.inf)).min(dim=-1)
    w1, w2 = b1.gather(1, index[:, None])[:, 0], b2.gather(1, index[:, None])[:, 0]
    return hit.any(dim=-1), dists, index, torch.stack([1 - (w1 + w2), w1, w2], dim=-1)


def _no_rays(origins):
    return (torch.zeros(0, dtype=torch.bool, device=origins.device), origins.new_zeros(0),
            torch.zeros(0, dtype=torch.int64, device=origins.device), origins.new_zeros(0, 3))


class RayCollisionFunction(torch.autograd.Function):
    """`cast_rays` without keeping its graph: the backward pass casts again with gradients.

    Inputs: origins, directions `[N, 3]`, faces `[F, 3]`, vertices `[V, 3]`; outputs as the fields
    of `RayCollisions`. Gradients reach origins, directions and vertices through ray_dists,
    barycentric and normals.
    """

    @staticmethod
    def forward(ctx, origins, directions, faces, vertices):
        ctx.save_for_backward(origins, directions, faces, vertices)
        with torch.no_grad():
            outputs = _nearest_hits(origins, directions, faces.long(), vertices)
        ctx.mark_non_differentiable(outputs[0], outputs[2])
        return outputs

    @staticmethod
    def backward(ctx, _collides_grad, dists_grad, _index_grad, bary_grad, normals_grad):
        origins, directions, faces, vertices = ctx.saved_tensors
        inputs = [x.detach().requires_grad_(True) for x in (origins, directions, vertices)]
        with torch.enable_grad():
            _, dists, _, bary, normals = _nearest_hits(inputs[0], inputs[1], faces.long(), inputs[2])
        grads = torch.autograd.grad(
            (dists, bary, normals), inputs, (dists_grad, bary_grad, normals_grad), allow_unused=True
        )
        return grads[0], grads[1], None, grads[2]
