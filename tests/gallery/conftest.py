"""Fixtures for the gallery tests: tiny random stand-ins for `text-small`, and one tiny gallery.

The stand-ins (a 1-layer prior, the golden transmitter, a 1-layer CLIP) are registered through
$SHAP_E_REGISTRY and $SHAP_E_CLIP, as the notebook tests do; their pictures are noise, but every
file the real gallery has is made by the same script and CLI.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from shap_e.models.configs import model_from_config

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
# Few seeds, steps and pixels: the script's behaviour, not the pictures, is under test.
TINY_OPTIONS = ["--seeds", "2", "--steps", "2", "--grid-size", "16", "--render-size", "16", "--max-faces", "100",
                "--device", "cpu"]
TINY_PROMPTS = ["a red cube", "a purple sphere", "a gray cylinder"]


@pytest.fixture(scope="session")
def gallery_script():
    """`samples/make_gallery.py` imported as a module (samples/ is a folder of scripts, not a package);
    its sibling `gallery_site` is `gallery_script.gallery_site`."""
    sys.path.insert(0, str(SAMPLES))
    try:
        spec = importlib.util.spec_from_file_location("make_gallery", SAMPLES / "make_gallery.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SAMPLES))
    return module


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, golden, registry_entry, tiny_clip) -> Path:
    """A folder with `registry.yaml` (`text-small` -> `transmitter-small`) and `clip/`."""
    folder = tmp_path_factory.mktemp("gallery_models")
    torch.manual_seed(0)
    prior = {"name": "SplitVectorDiffusion", "d_latent": 64 * 24, "latent_ctx": 64,
             "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 1, "heads": 2,
                       "time_token_cond": True, "token_cond": True, "use_pos_emb": True}}
    model = model_from_config(prior)
    # Larger outputs than the zero-initialised projection, so that latents differ between prompts.
    torch.nn.init.normal_(model.wrapped.output_proj.weight, std=0.05)
    f = golden("f")
    registry = {
        "text-small": registry_entry(folder, "text-small", prior, model.state_dict(), decoders=["transmitter-small"]),
        "transmitter-small": registry_entry(folder, "transmitter-small", f["config"]["transmitter"], f["state_dict"]),
    }
    (folder / "registry.yaml").write_text(yaml.safe_dump(registry))
    (folder / "clip").symlink_to(tiny_clip, target_is_directory=True)
    return folder


def tiny_environment(models: Path, cache: Path) -> dict:
    """Environment variables that make a fresh process see the stand-ins (and no official cache)."""
    return {**os.environ, "SHAP_E_REGISTRY": str(models / "registry.yaml"), "SHAP_E_CLIP": str(models / "clip"),
            "SHAP_E_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def tiny_site(tiny_models, tmp_path_factory) -> Path:
    """A site folder made by running `python samples/make_gallery.py` as the lead will (3 prompts x 2 seeds)."""
    site = tmp_path_factory.mktemp("gallery_site")
    prompts = tmp_path_factory.mktemp("gallery_prompts") / "prompts.txt"
    prompts.write_text("\n".join(TINY_PROMPTS) + "\n")
    command = [sys.executable, str(SAMPLES / "make_gallery.py"), "--site", str(site), "--prompts", str(prompts),
               *TINY_OPTIONS]
    cache = tmp_path_factory.mktemp("gallery_cache")
    result = subprocess.run(command, env=tiny_environment(tiny_models, cache), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return site
