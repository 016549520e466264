"""Official `shap_e.rendering.mc`: the reference's triangle table (golden f) and marching cubes (golden g)."""
import torch

from shap_e.rendering.mc import McLookupTable, marching_cubes
from shap_e.rendering.torch_mesh import TorchMesh


def test_lookup_table_is_the_reference_table(golden):
    ref = golden("f")["outputs"]["mc_lookup_table"]
    table = McLookupTable.reference()
    assert torch.equal(table.cases, ref["cases"]) and torch.equal(table.masks, ref["masks"])


def test_marching_cubes_gives_the_reference_mesh(golden):
    mc = golden("g")["outputs"]["misc"]["marching_cubes"]
    mesh = marching_cubes(mc["field"], mc["min_point"], mc["size"])
    assert isinstance(mesh, TorchMesh)
    assert torch.equal(mesh.faces, mc["faces"])
    torch.testing.assert_close(mesh.verts, mc["verts"], atol=1e-6, rtol=0)
