import itertools

import pytest
import torch

from shap_e.rendering.marching_cubes import marching_cubes
from shap_e.rendering.mc_table import triangle_table

# Cube edge -> its two corners (dx, dy, dz), in the numbering of docs/behaviour.md#marching-cubes.
_EDGE_CORNERS = [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7), (0, 4), (1, 5), (2, 6), (3, 7)]


def _corner(bit):
    return torch.tensor([bit & 1, (bit >> 1) & 1, (bit >> 2) & 1])


def _all_cubes_reference(field, min_point, size):
    """The reference algorithm written out literally: every cube, every triangle, then `unique`."""
    nx, ny, nz = field.shape
    cases, masks = triangle_table()
    dims = [(nx - 1, ny, nz), (nx, ny - 1, nz), (nx, ny, nz - 1)]
    offsets = [0, dims[0][0] * ny * nz, dims[0][0] * ny * nz + nx * dims[1][1] * nz]
    tris = []
    for x, y, z in itertools.product(range(nx - 1), range(ny - 1), range(nz - 1)):
        case = sum(int(field[x + b[0], y + b[1], z + b[2]] > 0) << bit for bit, b in enumerate(map(_corner, range(8))))
        for tri, valid in zip(cases[case].tolist(), masks[case].tolist()):
            if not valid:
                continue
            ids = []
            for edge in tri:
                lo = torch.tensor([x, y, z]) + _corner(_EDGE_CORNERS[edge][0])
                axis = int((_corner(_EDGE_CORNERS[edge][1]) - _corner(_EDGE_CORNERS[edge][0])).argmax())
                d = dims[axis]
                ids.append(offsets[axis] + (int(lo[0]) * d[1] + int(lo[1])) * d[2] + int(lo[2]))
            tris.append(ids)
    edges, faces = torch.unique(torch.tensor(tris).view(-1), return_inverse=True)
    verts = []
    for e in edges.tolist():
        axis = max(a for a in range(3) if e >= offsets[a])
        d = dims[axis]
        local = e - offsets[axis]
        lo = torch.tensor([local // (d[1] * d[2]), (local // d[2]) % d[1], local % d[2]])
        hi = lo + torch.eye(3, dtype=torch.int64)[axis]
        s1, s2 = field[tuple(lo)], field[tuple(hi)]
        scale = torch.tensor([nx - 1, ny - 1, nz - 1]).float()
        p1, p2 = lo.float() / scale * size + min_point, hi.float() / scale * size + min_point
        t = s1 / (s1 - s2)
        verts.append(t * p2 + (1 - t) * p1)
    return torch.stack(verts), faces.view(-1, 3)


def _sphere_field(n, radius=0.6):
    lin = torch.linspace(-1, 1, n)
    x, y, z = torch.meshgrid(lin, lin, lin, indexing="ij")
    return radius - (x * x + y * y + z * z).sqrt()


def test_triangle_table_matches_golden_reference_table(golden):
    ref = golden("f")["outputs"]["mc_lookup_table"]
    cases, masks = triangle_table()
    assert torch.equal(cases, ref["cases"])
    assert torch.equal(masks, ref["masks"])


def test_marching_cubes_reproduces_golden_small_field_exactly(golden):
    ref = golden("g")["outputs"]["misc"]["marching_cubes"]
    mesh = marching_cubes(ref["field"], ref["min_point"], ref["size"])
    assert mesh.faces.dtype == torch.int64 and mesh.verts.dtype == torch.float32
    assert torch.equal(mesh.faces, ref["faces"])
    torch.testing.assert_close(mesh.verts, ref["verts"], atol=1e-6, rtol=0)


def test_marching_cubes_on_padded_stf_grid_reproduces_golden_decoded_mesh(golden):
    stf = golden("f")["outputs"]["stf"]
    mesh = marching_cubes(stf["fields_padded"][0], min_point=-1.0, size=2.0)
    assert torch.equal(mesh.faces, stf["mesh"]["faces"])
    torch.testing.assert_close(mesh.verts, stf["mesh"]["verts"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed, shape", [(0, (5, 4, 6)), (1, (3, 6, 4)), (2, (6, 5, 3))])
def test_active_cubes_give_the_same_mesh_as_walking_all_cubes(seed, shape):
    generator = torch.Generator().manual_seed(seed)
    field = torch.randn(shape, generator=generator)
    min_point, size = torch.tensor([-1.0, 0.5, 2.0]), torch.tensor([2.0, 1.0, 3.0])
    mesh = marching_cubes(field, min_point, size)
    verts, faces = _all_cubes_reference(field, min_point, size)
    assert torch.equal(mesh.faces, faces)
    torch.testing.assert_close(mesh.verts, verts, atol=1e-6, rtol=0)


def test_sphere_mesh_is_closed_outward_and_on_the_surface():
    mesh = marching_cubes(_sphere_field(24), torch.full((3,), -1.0), torch.full((3,), 2.0))
    edges = mesh.faces[:, [0, 1, 1, 2, 2, 0]].view(-1, 2)
    # Closed and consistently wound: every directed edge appears once and its reverse once.
    directed = edges[:, 0] * len(mesh.verts) + edges[:, 1]
    reverse = edges[:, 1] * len(mesh.verts) + edges[:, 0]
    assert len(torch.unique(directed)) == len(directed)
    assert torch.equal(torch.sort(directed).values, torch.sort(reverse).values)
    a, b, c = mesh.verts[mesh.faces].unbind(dim=1)
    normals = torch.cross(b - a, c - a, dim=-1)
    assert ((normals * (a + b + c)).sum(-1) > 0).all()  # counter-clockwise seen from outside
    torch.testing.assert_close(mesh.verts.norm(dim=-1), torch.full((len(mesh.verts),), 0.6), atol=0.01, rtol=0)


@pytest.mark.parametrize("value", [-1.0, 1.0])
def test_field_without_sign_change_gives_empty_mesh(value):
    mesh = marching_cubes(torch.full((4, 4, 4), value), -1.0, 2.0)
    assert mesh.verts.shape == (0, 3) and mesh.faces.shape == (0, 3)
    assert mesh.faces.dtype == torch.int64


def test_bad_inputs_raise_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="field"):
        marching_cubes(torch.zeros(4, 4), -1.0, 2.0)
    with pytest.raises(ValueError, match="field"):
        marching_cubes(torch.zeros(4, 4, 4, dtype=torch.int64), -1.0, 2.0)
    with pytest.raises(ValueError, match="size"):
        marching_cubes(torch.zeros(4, 4, 4), -1.0, [2.0, 2.0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_marching_cubes_on_cuda_matches_cpu(golden):
    stf = golden("f")["outputs"]["stf"]
    cpu = marching_cubes(stf["fields_padded"][0], -1.0, 2.0)
    gpu = marching_cubes(stf["fields_padded"][0].cuda(), -1.0, 2.0)
    assert gpu.verts.is_cuda
    assert torch.equal(gpu.faces.cpu(), cpu.faces)
    torch.testing.assert_close(gpu.verts.cpu(), cpu.verts, atol=1e-6, rtol=0)
