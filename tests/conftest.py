"""Shared test setup: one torch thread (2 shared cores are 10-30x slower with 2), golden data, and
the pieces of the tiny stand-in models that tests register through $SHAP_E_REGISTRY/$SHAP_E_CLIP."""
import copy
import gc
import hashlib
import itertools
import linecache
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch

torch.set_num_threads(1)

GOLDEN_DIR = Path(__file__).parent / "golden"


def load_golden(name: str) -> dict:
    """Load a golden file (produced by the official implementation) by its letter prefix, e.g. 'a'."""
    matches = sorted(GOLDEN_DIR.glob(f"{name}_*.pt"))
    if not matches:
        raise FileNotFoundError(f"no golden file {name}_*.pt in {GOLDEN_DIR}")
    return torch.load(matches[0], weights_only=True)


@pytest.fixture(scope="session")
def golden():
    cache = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = load_golden(name)
        return cache[name]

    return get


class PeakRss:
    """Peak resident memory of this process since `start()`, from /proc (Linux)."""

    @staticmethod
    def _status_mb(key: str) -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))

    def start(self) -> None:
        self.baseline = self._status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:  # 5: reset the peak (VmHWM) to the current RSS
            f.write("5")

    def grown_mb(self) -> float:
        return self._status_mb("VmHWM") - self.baseline

    def held_mb(self) -> float:
        """The RSS now above the RSS at `start`."""
        return self._status_mb("VmRSS") - self.baseline


@pytest.fixture
def peak_rss() -> PeakRss:
    """`start()`, then `grown_mb()` / `held_mb()`: how far the peak / current RSS rose above the RSS at
    `start` (Linux only)."""
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux's peak-RSS reset (/proc/self/clear_refs)")
    gc.collect()
    return PeakRss()


@pytest.fixture(scope="session")
def golden_text_prior(golden):
    """`(model, a)`: golden file a's release-flag text prior (variant_A: width 64, 2 layers) with its
    weights, in eval mode, and the file itself (inputs and outputs)."""
    from shap_e.models.configs import model_from_config

    a = golden("a")
    model = model_from_config(a["config"]["variant_A"])
    model.load_state_dict(a["state_dict"]["variant_A"])
    return model.eval(), a


@pytest.fixture(scope="session")
def golden_renderer(golden):
    """Golden f's `NeRSTFRenderer` with its weights (shared: do not modify it)."""
    from shap_e.models.nerstf.renderer import build_renderer

    f = golden("f")
    renderer = build_renderer(f["config"]["transmitter"]["renderer"])
    prefix = "renderer."
    renderer.load_state_dict({k[len(prefix):]: v for k, v in f["state_dict"].items() if k.startswith(prefix)}, strict=True)
    return renderer


@pytest.fixture(scope="session")
def points_only_transmitter(golden):
    """`config(inner_batch_size=256)`: a fresh copy of the golden transmitter config reading points
    alone, like transmitter-small (no views to render)."""

    def config(inner_batch_size: int = 256) -> dict:
        config = copy.deepcopy(golden("e")["config"])
        config["encoder"].update(cross_attention_dataset="pcl", use_pointconv=False, inner_batch_size=inner_batch_size)
        return config

    return config


@pytest.fixture(scope="session")
def warned_at():
    """`where(record)`: the file and the stripped source line a caught warning names, to check that a
    warning points at the caller's line (by its text, so lines added around it do not matter)."""

    def where(record) -> tuple:
        return record.filename, linecache.getline(record.filename, record.lineno).strip()

    return where


@pytest.fixture(scope="session")
def registry_entry():
    """`write(folder, name, config, state, **fields)`: save a stand-in's weights and config in
    `folder` and return its `$SHAP_E_REGISTRY` entry (ModelSpec fields, weights as a file URL)."""
    import yaml
    from safetensors.torch import save_file

    def write(folder: Path, name: str, config: dict, state: dict, **fields) -> dict:
        weights = folder / f"{name}.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))
        return {"config_file": str(folder / f"{name}.yaml"), "url": weights.as_uri(),
                "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(), "description": f"tiny {name}", **fields}

    return write


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> Path:
    """A 1-layer random CLIP (real vocabulary size, 768-d projection) saved once for `$SHAP_E_CLIP`."""
    from transformers import CLIPConfig, CLIPModel

    folder = tmp_path_factory.mktemp("tiny_clip")
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    torch.manual_seed(0)
    CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                         pad_token_id=0, **common),
        vision_config=dict(image_size=32, patch_size=8, **common), projection_dim=768,
    )).save_pretrained(folder)
    return folder


@pytest.fixture
def torchrun(tmp_path):
    """`run(*args)`: `torchrun --standalone --nproc_per_node 2 *args` (a script and its arguments, or
    `-m module ...`; the launcher binds a free local port itself), one torch thread per process;
    returns each rank's stderr. Unless both processes exit 0 it fails the test with the launcher's
    stderr and each worker's own log, which say why."""
    calls = itertools.count()

    def run(*args: str) -> List[str]:
        log_dir = tmp_path / f"torchrun_logs_{next(calls)}"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "--log-dir", str(log_dir), "--redirects", "3",  # each worker's output in its own file
            *args,
        ]
        result = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                                timeout=240)
        if result.returncode != 0:
            logs = [f"{path.relative_to(log_dir)}:\n{path.read_text(errors='replace')}"
                    for path in sorted(log_dir.rglob("*.log"))]
            pytest.fail("\n".join([f"torchrun exited {result.returncode}; its stderr:\n{result.stderr}", *logs]))
        return [next(log_dir.glob(f"*/attempt_0/{rank}/stderr.log")).read_text() for rank in (0, 1)]

    return run
