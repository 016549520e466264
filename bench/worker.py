"""Run one stage in this (fresh) process and write its result as JSON.

Usage (by `bench.run`, not by hand): `python -m bench.worker '<json request>' <result path>`.
The request has `stage, threads, device, repeats, warmup, tiny, seed, fast_steps, samples, cuda_graph`.
"""
import json
import os
import sys
import traceback
from typing import Any, Callable, Dict

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.measure import measure, proc_status_mb, reset_peak_rss
from bench.stage_types import Context, StageUnavailable
from bench.stages import STAGE_BY_NAME


def run_stage(request: Dict[str, Any]) -> Dict[str, Any]:
    """Set threads, build the stage, time it, and collect memory figures and extra metrics."""
    torch.set_num_threads(request["threads"])
    device = torch.device(request["device"])
    stage = STAGE_BY_NAME[request["stage"]]
    ctx = Context(device=device, tiny=request["tiny"], seed=request["seed"], fast_steps=request["fast_steps"],
                  samples=request.get("samples", 1), cuda_graph=request.get("cuda_graph", False))
    result: Dict[str, Any] = {"stage": stage.name, "description": stage.description,
                              "threads": request["threads"], "rss_baseline_mb": proc_status_mb("VmRSS")}
    try:
        prepared = stage.setup(ctx)
    except StageUnavailable as e:
        return {**result, "status": "not available", "reason": str(e)}
    result["rss_after_setup_mb"] = proc_status_mb("VmRSS")
    result["setup_peak_rss_mb"] = proc_status_mb("VmHWM")
    reset_ok = reset_peak_rss()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    warmup = request["warmup"]
    if stage.count_flops and warmup >= 1 and "flops" not in prepared.info:
        result.update(count_flops(prepared.run))
        warmup -= 1
    timing, out = measure(prepared.run, request["repeats"], warmup, device)
    result.update(
        status="ok", info=prepared.info, median_s=timing.median_s, min_s=timing.min_s,
        runs_s=timing.runs_s, warmup=request["warmup"],
        cpu_median_s=timing.cpu_median_s, cpu_runs_s=timing.cpu_runs_s,
        run_peak_rss_mb=proc_status_mb("VmHWM") if reset_ok else None,
        cuda_peak_mb=torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
    )
    result["stage_peak_rss_mb"] = max(result["setup_peak_rss_mb"] or 0, result["run_peak_rss_mb"] or 0) or None
    if prepared.after is not None:
        result["metrics"] = prepared.after(out)
    return result


def count_flops(fn: Callable[[], Any], top: int = 4) -> Dict[str, Any]:
    """Run `fn` once under torch's FLOP counter: the total and the costliest leaf modules.

    The counter has no formula for CPU fused attention, so attention FLOPs are missing from it.
    """
    with FlopCounterMode(display=False) as counter:
        fn()
    per_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items() if name != "Global"}
    leaves = {n: f for n, f in per_module.items() if not any(o.startswith(n + ".") for o in per_module)}
    ranked = sorted(leaves.items(), key=lambda item: -item[1])[:top]
    return {"counted_flops": float(counter.get_total_flops()),
            "counted_flops_top": {name: float(f) for name, f in ranked}}


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    request, result_path = json.loads(argv[0]), argv[1]
    try:
        result = run_stage(request)
    except Exception as e:  # reported in the table; the harness goes on with the next stage
        result = {"stage": request["stage"], "threads": request["threads"], "status": "error",
                  "reason": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)


if __name__ == "__main__":
    main()
