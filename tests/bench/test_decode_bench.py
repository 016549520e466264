"""bench/decode.py helpers that need no full-size model: view subsets and the results file."""
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
    assert set(decode.STAGES) == set(decode.MESH_STAGES) | set(decode.VIEW_STAGES) | {"agree128", "agree_nerf"}
