"""The notebooks run headless, top to bottom, on tiny stand-ins for the small bundled models.

The stand-ins (random weights, registered through $SHAP_E_REGISTRY, CLIP through $SHAP_E_CLIP)
check that every cell of every notebook works with the public API; the pictures are noise. To keep
the run short the test lowers batch size, steps and render sizes in the notebook text.
"""
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from shap_e.models.configs import model_from_config

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SMALLER = {"batch_size = 4": "batch_size = 2", "karras_steps=64": "karras_steps=4",
           "size = 64": "size = 8", "size = 128": "size = 8", "n_assets = 32": "n_assets = 3",
           "steps = 200": "steps = 2", "64, 1e-3, 160": "4, 1e-3, 160", "create_pan_cameras(64": "create_pan_cameras(8"}


def prior_config(inner_name, **inner):
    return {"name": "SplitVectorDiffusion", "d_latent": 64 * 24, "latent_ctx": 64,
            "inner": {"name": inner_name, "width": 32, "layers": 1, "heads": 2, "time_token_cond": True,
                      "use_pos_emb": True, **inner}}


@pytest.fixture(scope="module")
def tiny_environment(tmp_path_factory, golden, registry_entry, tiny_clip):
    folder = tmp_path_factory.mktemp("tiny_models")
    torch.manual_seed(0)
    text = prior_config("CLIPImagePointDiffusionTransformer", token_cond=True)
    image = prior_config("CLIPImageGridPointDiffusionTransformer", grid_channels=32, grid_tokens=16)
    f = golden("f")
    registry = {
        "text-small": registry_entry(folder, "text-small", text, model_from_config(text).state_dict(),
                                  decoders=["transmitter-small"], guidance_scale=3.0, guidance_max_sigma=5.0),
        "image-small": registry_entry(folder, "image-small", image, model_from_config(image).state_dict(),
                                   decoders=["transmitter-small"]),
        # Like the bundled one, the stand-in lists STF alone: the notebooks must then render with STF.
        "transmitter-small": registry_entry(folder, "transmitter-small", f["config"]["transmitter"], f["state_dict"],
                                            render_modes=["stf"], kind="transmitter"),
    }
    (folder / "registry.yaml").write_text(yaml.safe_dump(registry))
    (folder / "clip").symlink_to(tiny_clip, target_is_directory=True)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["sample_text_to_3d.ipynb", "sample_image_to_3d.ipynb", "encode_model.ipynb", "train_small.ipynb"]
)
def test_notebook_runs_headless(name, tiny_environment, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAP_E_REGISTRY", str(tiny_environment / "registry.yaml"))
    monkeypatch.setenv("SHAP_E_CLIP", str(tiny_environment / "clip"))
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    shutil.copytree(NOTEBOOKS / "example_data", tmp_path / "example_data")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), "strip outputs"
    for cell in notebook.cells:
        for old, new in SMALLER.items():
            cell.source = cell.source.replace(old, new)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("prior:" in o.get("text", "") for o in outputs) or name == "encode_model.ipynb"
    if name == "train_small.ipynb":
        assert (tmp_path / "runs" / "text" / "model.safetensors").is_file()
    if name == "sample_text_to_3d.ipynb":
        assert (tmp_path / "example_mesh_0.glb").is_file() and (tmp_path / "example_mesh_1.ply").is_file()
