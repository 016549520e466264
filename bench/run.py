"""Command line of the benchmark: `python -m bench [--quick] [--device cpu] [--threads 1,2] ...`.

Each (stage, thread count) runs in a fresh subprocess (`bench.worker`) so that peak RSS is per
stage and one stage's caches cannot speed up another. Results go to
`bench/results/<timestamp>.json` and `.md`, and the Markdown table is printed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from bench.measure import system_info
from bench.report import add_efficiency, markdown, write_report
from bench.stage_types import Stage
from bench.stages import STAGE_BY_NAME, STAGES
from shap_e.diffusion.presets import FAST_STEPS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="about 2 minutes: the quick stages, 1 timed run each, no warm-up")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 ...")
    p.add_argument("--threads", default="1", help="comma-separated torch thread counts, e.g. 1,2")
    p.add_argument("--stages", default=None,
                   help=f"comma-separated subset of: {', '.join(s.name for s in STAGES)}")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per stage (default: the stage's)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up runs per stage (default: the stage's)")
    p.add_argument("--fast-steps", type=int, default=FAST_STEPS, help="steps of the DPM-Solver++(2M) preset")
    p.add_argument("--samples", type=int, default=1,
                   help="latents drawn at once by the sampler stages (rows per evaluation: 2 per sample)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="the sampler stages replay the model from CUDA graphs (sample_latents(cuda_graph=True))")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="toy-sized models: tests the harness, numbers mean nothing")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per stage before it is killed")
    p.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    p.add_argument("--peer", choices=("diffusers",),
                   help="also run the peer comparison (bench/peer_diffusers.py: the same models in diffusers, beside "
                        "ours in one process; needs the 'peer' extra); alone, it runs no other stage but matmul_peak")
    args = p.parse_args(argv)
    try:
        args.thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads must be comma-separated integers, got {args.threads!r}")
    if any(t < 1 for t in args.thread_counts):
        p.error("--threads values must be >= 1")
    if args.samples < 1:
        p.error(f"--samples must be >= 1, got {args.samples}")
    args.stage_list = select_stages(p, args)
    return args


def select_stages(p: argparse.ArgumentParser, args: argparse.Namespace) -> List[Stage]:
    """The stages to run, in registry order; `matmul_peak` always runs (it scales the others)."""
    if args.stages is None:
        names = [] if args.peer else [s.name for s in STAGES if s.quick or not args.quick]
    else:
        names = [n.strip() for n in args.stages.split(",") if n.strip()]
        unknown = [n for n in names if n not in STAGE_BY_NAME]
        if unknown:
            p.error(f"unknown stage(s) {unknown}; valid: {', '.join(STAGE_BY_NAME)}")
    names = set(names) | {"matmul_peak"}
    return [s for s in STAGES if s.name in names]


def run_in_subprocess(request: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Run one stage via `python -m bench.worker`; a crash or timeout becomes an error row."""
    env = dict(os.environ, OMP_NUM_THREADS=str(request["threads"]), MKL_NUM_THREADS=str(request["threads"]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "bench.worker", json.dumps(request), path]
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {**_row(request), "status": "error", "reason": f"timed out after {timeout:.0f} s"}
        if not os.path.exists(path):
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            return {**_row(request), "status": "error", "reason": f"worker exit {proc.returncode}: {' / '.join(tail)}"}
        with open(path) as f:
            return json.load(f)


def _row(request: Dict[str, Any]) -> Dict[str, Any]:
    return {"stage": request["stage"], "threads": request["threads"],
            "description": STAGE_BY_NAME[request["stage"]].description}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Run every selected stage at every thread count; return the report document."""
    device = torch.device(args.device)
    doc: Dict[str, Any] = {
        "timestamp": time.strftime("%Y%m%d-%H%M%S"),
        "mode": "tiny" if args.tiny else ("quick" if args.quick else "full"),
        "system": system_info(device),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                 if k not in ("stage_list", "thread_counts")},
        "results": [],
    }
    for stage in args.stage_list:
        for threads in args.thread_counts:
            request = {
                "stage": stage.name, "threads": threads, "device": args.device, "tiny": args.tiny,
                "seed": args.seed, "fast_steps": args.fast_steps, "samples": args.samples,
                "cuda_graph": args.cuda_graph,
                "repeats": args.repeats or (1 if args.quick else stage.repeats),
                "warmup": args.warmup if args.warmup is not None else (0 if args.quick else stage.warmup),
            }
            print(f"[bench] {stage.name} threads={threads} ...", file=sys.stderr, flush=True)
            doc["results"].append(run_in_subprocess(request, args.timeout))
    if args.peer:
        doc["peer"] = run_peer(args)
    doc["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    add_efficiency(doc["results"])
    return doc


def run_peer(args: argparse.Namespace) -> Dict[str, Any]:
    """`python -m bench.peer_diffusers` in its own process, at the first thread count; its result document."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peer.json"
        cmd = [sys.executable, "-m", "bench.peer_diffusers", "--threads", str(args.thread_counts[0]),
               "--repeats", str(args.repeats or 3), "--warmup", str(1 if args.warmup is None else args.warmup),
               "--out", str(out)]
        print(f"[bench] peer {args.peer} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, cwd=REPO_ROOT, timeout=args.timeout, capture_output=True, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS=str(args.thread_counts[0])))
        if proc.returncode != 0 or not out.exists():
            return {"status": "error", "reason": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
        return json.loads(out.read_text())


def main(argv: Optional[List[str]] = None) -> Dict[str, Path]:
    """Parse arguments, run, write `<timestamp>.json`/`.md`, print the table; return the paths."""
    args = parse_args(argv)
    doc = run(args)
    paths = write_report(doc, args.out_dir)
    print(markdown(doc))
    print(f"written: {paths['json']} and {paths['md']}")
    return paths


if __name__ == "__main__":
    main()
