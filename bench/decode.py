"""Decoder benchmark: full-size NeRSTF renderer with random weights, latent -> mesh / images.

Usage: `python -m bench.decode [--threads 1] [--repeats 3] [--warmup 1] [--only mesh128 ...]`.
Stages: `decode_latent_mesh` at grid 128 and 256, NeRF 20 pan views at 64x64, STF 20 pan views at
128x128 (grid 128). Each stage reports the median (and min) wall time of `repeats` runs after
`warmup` untimed runs, and the peak RSS of the timed runs (`VmHWM`, reset before each stage).
Results are printed and merged into `bench/results/decode.json` (one row per stage).
"""
import argparse
import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import yaml

from bench.measure import measure, proc_status_mb, reset_peak_rss
from shap_e.models.configs import model_from_config
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.util import notebooks

CONFIG = Path(__file__).resolve().parents[1] / "shap_e" / "configs" / "vector_decoder_config.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "decode.json"
MESH_STAGES = {"mesh128": 128, "mesh256": 256}  # name -> grid size
VIEW_STAGES = {"nerf64": ("nerf", 64), "stf128": ("stf", 128)}  # name -> (mode, image size)
STAGES = (*MESH_STAGES, *VIEW_STAGES)


def build_decoder(grid_size: int, seed: int, device: torch.device):
    """The release ChannelsDecoder with random weights and one random latent in (-1, 1)."""
    with open(CONFIG) as f:
        config = copy.deepcopy(yaml.safe_load(f))
    config["renderer"]["grid_size"] = grid_size
    torch.manual_seed(seed)
    xm = model_from_config(config, device=device).eval()
    generator = torch.Generator().manual_seed(seed)
    latent = torch.rand(config["latent_ctx"] * config["d_latent"], generator=generator) * 2 - 1
    return xm, latent.to(device)


def stage_fn(name: str, seed: int, device: torch.device) -> Callable[[], Dict[str, Any]]:
    """A zero-argument callable running one stage and returning its size facts."""
    if name in MESH_STAGES:
        xm, latent = build_decoder(MESH_STAGES[name], seed, device)

        def run_mesh() -> Dict[str, Any]:
            mesh = notebooks.decode_latent_mesh(xm, latent)
            return {"verts": int(mesh.verts.shape[0]), "faces": int(mesh.faces.shape[0])}

        return run_mesh
    mode, size = VIEW_STAGES[name]
    xm, latent = build_decoder(128, seed, device)
    cameras = create_pan_cameras(size, device=device)

    def run_views() -> Dict[str, Any]:
        generator = torch.Generator(device=device).manual_seed(seed)
        images = notebooks.decode_latent_images(xm, latent, cameras, rendering_mode=mode, generator=generator)
        return {"views": len(images), "size": size}

    return run_views


def run_stage(name: str, repeats: int, warmup: int, seed: int, device: torch.device) -> Dict[str, Any]:
    """Build, warm up and time one stage; peak RSS covers the timed runs only."""
    fn = stage_fn(name, seed, device)
    if warmup:
        measure(fn, repeats=1, warmup=warmup - 1, device=device)
    reset_ok = reset_peak_rss()
    timing, facts = measure(fn, repeats=repeats, warmup=0, device=device)
    return {
        "stage": name, "median_s": round(timing.median_s, 3), "min_s": round(timing.min_s, 3),
        "runs_s": [round(r, 3) for r in timing.runs_s], "peak_rss_mib": proc_status_mb("VmHWM"),
        "peak_rss_reset": reset_ok, **facts,
    }


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES))
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    for name in args.only:
        row = run_stage(name, args.repeats, args.warmup, args.seed, device)
        row.update(threads=torch.get_num_threads(), device=str(device))
        print(json.dumps(row), flush=True)
        rows.append(row)
    save_rows(rows)
    return rows


def save_rows(rows: List[Dict[str, Any]]) -> None:
    """Merge `rows` into the results file (a new row replaces the old one of its stage), atomically."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    fresh = {row["stage"] for row in rows}
    merged = [row for row in old if row["stage"] not in fresh] + rows
    fd, tmp = tempfile.mkstemp(dir=RESULTS.parent, prefix=".decode.")
    with os.fdopen(fd, "w") as f:
        json.dump(merged, f, indent=1)
    os.replace(tmp, RESULTS)


if __name__ == "__main__":
    main()
