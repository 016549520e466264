"""bench/decode.py helpers: view subsets, the results file, and the plain baseline of the exact mesh mode."""
import json

import torch

from bench import decode
from shap_e.rendering.cameras import create_pan_cameras


def test_pan_views_are_the_first_pan_cameras():
    views = decode.pan_views(8, 4, torch.device("cpu"))
    pan = create_pan_cameras(8)
    assert views.shape == (1, 4) and views.width == 8
    assert torch.equal(views.origin, pan.origin[:4]) and torch.equal(views.z, pan.z[:4])


def test_results_keep_one_row_per_stage_and_latent(tmp_path, monkeypatch):
    monkeypatch.setattr(decode, "RESULTS", tmp_path / "decode.json")
    decode.save_rows([{"stage": "mesh128", "latent": "noise", "median_s": 9.0}])
    decode.save_rows([{"stage": "mesh128", "latent": "structured", "median_s": 1.0}])
    decode.save_rows([{"stage": "mesh128", "latent": "noise", "median_s": 8.0}])
    rows = json.loads((tmp_path / "decode.json").read_text())
    assert sorted((r["latent"], r["median_s"]) for r in rows) == [("noise", 8.0), ("structured", 1.0)]


def test_every_stage_has_a_runner():
    assert set(decode.STAGES) == set(decode.MESH_STAGES) | set(decode.VIEW_STAGES) | {
        "mesh128_plain", "agree128", "agree_nerf"}


@torch.no_grad()
def test_plain_reference_mesh_is_the_exact_mode_mesh():
    """The baseline of the exact mode computes the same mesh (the release decoder, random weights and
    a random latent, whose noise field has surface in most cells)."""
    xm, latent = decode.build_decoder(24, 0, torch.device("cpu"))
    params = xm.bottleneck_to_params(latent[None])
    plain = decode.plain_mesh(xm, params, 24)
    exact = xm.renderer.extract_mesh(params, grid_size=24, mesh_mode="exact")[0]
    assert exact.faces.shape[0] > 1000
    assert torch.equal(plain.faces, exact.faces)
    torch.testing.assert_close(plain.verts, exact.verts, atol=1e-5, rtol=0)
    for c in "RGB":
        torch.testing.assert_close(plain.vertex_channels[c], exact.vertex_channels[c], atol=1e-5, rtol=0)
