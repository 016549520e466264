"""Official text -> GLB end to end: `shap-e text PROMPT --model text300M --preset fast --format glb`.

The stage `official_text_to_glb` (and `_int8`, with `--precision int8`) runs the command in a fresh
Python process (`python -m bench.official_e2e CHILD.json`), which calls `shap_e.cli.main` in-process and
records the wall time, CPU time and peak RSS (`VmHWM`, reset at each phase start) of each phase:

* `startup`: the interpreter importing torch and the package, up to the command;
* `load_prior`: the checkpoint's sha256 check, the memory-mapped read and the model build;
* `embed`: CLIP's text tower loaded from its folder, the prompt embedded, CLIP freed;
* `sample`: `sample_latents` (20 DPM-Solver++(2M) steps, guidance 15);
* `load_decoder`: the `decoder` checkpoint, as the prior;
* `decode`: `decode_latent_mesh` at grid 128; `write`: the GLB file.

The weights are full-size and random: text300M and the decoder are built from the shipped configs
with seeded random weights (zero-initialised matrices randomised) and saved as `.pt` checkpoints, and
CLIP ViT-L/14 (the real text and vision shapes, random weights: the real ones cannot be downloaded
here) is saved with `save_pretrained`. They are registered through `$SHAP_E_REGISTRY`/`$SHAP_E_CLIP`
and made once under `bench/results/official_e2e/` (about 4 GB), then reused. A random prior's latents
decode to a noise field with surface in most cells, so `decode` and `write` are a worst case: the
face count is reported.
"""
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch

from bench.measure import proc_status_mb, reset_peak_rss
from bench.stage_types import Context, Prepared, StageUnavailable

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "bench" / "results" / "official_e2e"
CONFIGS = ROOT / "shap_e" / "configs"
PROMPT = "a red chair"
# CLIP ViT-L/14's shapes (openai/clip-vit-large-patch14).
CLIP_TEXT = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                 num_attention_heads=12, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                 pad_token_id=0)
# (module, function, phase): the command looks each function up in its module when it calls it.
PHASES = [
    ("shap_e.cli.generate", "load_pipeline", "load_prior"),
    ("shap_e.cli.pipeline", "condition", "embed"),
    ("shap_e.diffusion.sample", "sample_latents", "sample"),
    ("shap_e.models.decode", "load_decoder", "load_decoder"),
    ("shap_e.models.decode", "decode_latent_mesh", "decode"),
    ("shap_e.rendering.export", "save_mesh", "write"),
]
CLIP_VISION = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                   image_size=224, patch_size=14)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _save_random_model(config_file: str, path: Path, seed: int) -> None:
    from bench.stages import randomize_zero_init
    from shap_e.models.configs import model_from_config

    torch.manual_seed(seed)
    model = model_from_config(CONFIGS / config_file)
    randomize_zero_init(model, seed)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)


def _save_random_clip(folder: Path, seed: int) -> None:
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(seed)
    tmp = folder.with_name(folder.name + ".tmp")
    CLIPModel(CLIPConfig(text_config=CLIP_TEXT, vision_config=CLIP_VISION, projection_dim=768)).save_pretrained(tmp)
    os.replace(tmp, folder)


def prepare(seed: int = 0) -> Dict[str, Path]:
    """The random checkpoints, CLIP folder, registry and pre-filled cache (made once, then reused)."""
    from shap_e.models.download import fetch_file_cached

    FILES.mkdir(parents=True, exist_ok=True)
    weights = {"text300M": ("text_cond_config.yaml", FILES / "text_cond.pt"),
               "decoder": ("vector_decoder_config.yaml", FILES / "vector_decoder.pt")}
    entries = {}
    for name, (config_file, path) in weights.items():
        if not path.exists():
            _save_random_model(config_file, path, seed)
        entries[name] = {"config_file": str(CONFIGS / config_file), "url": path.as_uri(), "sha256": _sha256(path),
                         "description": f"{name} shapes, random weights (benchmark)"}
    entries["text300M"]["decoders"] = ["decoder", "transmitter"]
    clip = FILES / "clip"
    if not clip.exists():
        _save_random_clip(clip, seed)
    registry = FILES / "registry.yaml"
    registry.write_text(json.dumps(entries))  # JSON is YAML
    cache = FILES / "cache"
    for entry in entries.values():  # the cache holds them as after `shap-e download`
        fetch_file_cached(entry["url"], progress=False, cache_dir=cache, sha256=entry["sha256"])
    return {"registry": registry, "clip": clip, "cache": cache}


class PhaseRecorder:
    """Wall time, CPU time and peak RSS of named phases; `VmHWM` is reset when a phase starts, and
    the process peak is the largest mark seen at any phase boundary or at the end."""

    def __init__(self) -> None:
        self.phases: List[Dict[str, Any]] = []
        self.process_peak_mb = 0.0

    def mark(self) -> None:
        """Fold the current `VmHWM` into the process peak (before a reset, and at the end)."""
        self.process_peak_mb = max(self.process_peak_mb, proc_status_mb("VmHWM") or 0.0)

    def wrap(self, module: Any, attribute: str, phase: str) -> None:
        """Replace `module.attribute` by a function that records each call as `phase`."""
        original = getattr(module, attribute)

        def recorded(*args, **kwargs):
            self.mark()
            reset_peak_rss()
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(phase, time.perf_counter() - wall, time.process_time() - cpu)

        setattr(module, attribute, recorded)

    def add(self, phase: str, wall_s: float, cpu_s: float) -> None:
        peak = proc_status_mb("VmHWM") or 0.0
        self.phases.append({"phase": phase, "wall_s": wall_s, "cpu_s": cpu_s, "peak_rss_mb": peak,
                            "rss_after_mb": proc_status_mb("VmRSS")})
        self.mark()


def _instrument(recorder: PhaseRecorder) -> None:
    """Record every call of the functions in `PHASES` (looked up at call time by the command)."""
    for module_name, attribute, phase in PHASES:
        recorder.wrap(importlib.import_module(module_name), attribute, phase)


def child(request: Dict[str, Any]) -> Dict[str, Any]:
    """In the fresh process: run the command with every phase recorded."""
    torch.set_num_threads(request["threads"])
    from shap_e.cli import main

    recorder = PhaseRecorder()  # CPU time so far is the imports': process_time counts from the process start
    recorder.add("startup", time.time() - request["started"], time.process_time())
    _instrument(recorder)
    wall = time.perf_counter()
    status = main(request["argv"])
    if status != 0:
        raise RuntimeError(f"shap-e {' '.join(request['argv'])} exited {status}")
    glb = next(Path(request["out"]).rglob("mesh.glb"))
    recorder.mark()
    return {"phases": recorder.phases, "command_wall_s": time.perf_counter() - wall,
            "process_peak_rss_mb": recorder.process_peak_mb, "glb_bytes": glb.stat().st_size,
            "faces": _face_count(glb)}


def _face_count(glb: Path) -> int:
    import trimesh

    return int(len(trimesh.load(glb, force="mesh", process=False).faces))


def official_text_to_glb(precision: str) -> Callable[[Context], Prepared]:
    """The stage: each run is one fresh process running the command (see the module docstring)."""

    def setup(ctx: Context) -> Prepared:
        if ctx.tiny or ctx.device.type != "cpu":
            raise StageUnavailable("full-size CPU stage (about 4 GB of random checkpoints)")
        paths = prepare(ctx.seed)
        argv = ["text", PROMPT, "--model", "text300M", "--preset", "fast", "--format", "glb", "--device", "cpu",
                "--cache-dir", str(paths["cache"]), "--seed", str(ctx.seed)]
        if precision != "float32":
            argv += ["--precision", precision]
        env = dict(os.environ, SHAP_E_REGISTRY=str(paths["registry"]), SHAP_E_CLIP=str(paths["clip"]),
                   HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

        def run() -> Dict[str, Any]:
            with tempfile.TemporaryDirectory(prefix="shap_e_bench_e2e_") as tmp:
                out = Path(tmp) / "out"
                request = {"argv": [*argv, "-o", str(out)], "out": str(out), "threads": torch.get_num_threads(),
                           "result": str(Path(tmp) / "result.json")}
                spawn(request, env)
                return json.loads(Path(request["result"]).read_text())

        command = f"shap-e text '{PROMPT}' --model text300M --preset fast --format glb"
        info = {"command": command + ("" if precision == "float32" else f" --precision {precision}"),
                "weights": "random, full size"}
        return Prepared(run, info, after=lambda out: out)

    return setup


def spawn(request: Dict[str, Any], env: Dict[str, str]) -> None:
    """Run `child(request)` in a fresh interpreter; its result lands in `request["result"]`."""
    request = {**request, "started": time.time()}
    proc = subprocess.run([sys.executable, "-m", "bench.official_e2e", json.dumps(request)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the end-to-end child failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")


def main(argv: List[str]) -> None:
    request = json.loads(argv[0])
    result = child(request)
    Path(request["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
