"""Fixtures for the gallery tests: tiny random stand-ins for `text-small`, and one tiny gallery.

The stand-ins (a 1-layer prior, the golden transmitter, a 1-layer CLIP) are registered through
$SHAP_E_REGISTRY and $SHAP_E_CLIP, as the notebook tests do; their pictures are noise, but every
file the real gallery has is made by the same script and CLI.
"""
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from shap_e.models.configs import model_from_config

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
# Few seeds, steps and pixels: the script's behaviour, not the pictures, is under test.
TINY_OPTIONS = ["--seeds", "2", "--steps", "2", "--grid-size", "16", "--render-size", "16", "--device", "cpu"]
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


def _write_model(folder: Path, name: str, config: dict, state: dict, **fields) -> dict:
    weights = folder / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))
    return {"config_file": str(folder / f"{name}.yaml"), "url": weights.as_uri(),
            "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(), "description": f"tiny {name}", **fields}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, golden) -> Path:
    """A folder with `registry.yaml` (`text-small` -> `transmitter-small`) and `clip/`."""
    from transformers import CLIPConfig, CLIPModel

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
        "text-small": _write_model(folder, "text-small", prior, model.state_dict(), decoders=["transmitter-small"]),
        "transmitter-small": _write_model(folder, "transmitter-small", f["config"]["transmitter"], f["state_dict"]),
    }
    (folder / "registry.yaml").write_text(yaml.safe_dump(registry))
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                         pad_token_id=0, **common),
        vision_config=dict(image_size=32, patch_size=8, **common), projection_dim=768,
    )).save_pretrained(folder / "clip")
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
